"""Shared helpers live in tests/support (imported as `tests.support.…`); fixtures stay in
the conftest beside the tests that use them, except those several folders share (here)."""

from __future__ import annotations

import multiprocessing
import os
import sys

import pytest

# no test leaves a process behind: its hooks, taken here for every test
from tests.support.leftovers import (  # noqa: F401
    pytest_configure,
    pytest_sessionfinish,
    pytest_terminal_summary,
    pytest_testnodedown,
)


@pytest.fixture(scope="session")
def moto_server():
    """moto's real server on 127.0.0.1, started once per session (per xdist worker): the
    eks, fleet and loadjob tests each reset it before use (`/moto-api/reset`), so none
    sees another's buckets or clusters. Imported here, not above: moto is a heavy import
    that a run of other folders does not need."""
    from tests.support.eks.aws import run_moto_server

    yield from run_moto_server()


# Files left out of `make check` (the inner loop, under 2 minutes on 2 cores) because their
# tests together take more than ~8 s of the parallel pass (junit times of the whole suite on
# a quiet 2-core machine): many analyses (each validates with Great Expectations), chains,
# servers. They are marked `slow` here, in one place, beside the files that mark themselves
# (a whole chain, a job, processes). `make test` runs every one of them.
HEAVY_FILES = frozenset({
    "tests/analysis/test_contract.py",
    "tests/analysis/test_cost.py",
    "tests/analysis/test_exact_reads.py",
    "tests/analysis/test_frontier.py",
    "tests/analysis/test_gates.py",
    "tests/analysis/test_metrics.py",
    "tests/analysis/test_not_measured.py",
    "tests/analysis/test_what_if.py",
    "tests/analysis/test_workload_outputs.py",
    "tests/eks/test_bill_gates.py",
    "tests/eks/test_iam_enforced.py",
    "tests/eks/test_nodegroup_lifecycle.py",
    "tests/eks/test_reaper.py",
    "tests/eks/test_refresh_and_cli.py",
    "tests/fleet/test_fleet_pools.py",
    "tests/fleet/test_fleet_s3_safety.py",
    "tests/loadgen/test_faults.py",
    "tests/loadgen/test_ladder.py",
    "tests/loadgen/test_load_modes.py",
    "tests/loadgen/test_server_metrics.py",
    "tests/loadgen/test_prompts.py",
    "tests/loadgen/test_workload_kinds.py",
    "tests/loadgen/test_workloads.py",
    "tests/loadjob/test_profile.py",
    "tests/pipelines/test_definitions.py",
    "tests/pipelines/test_sweep_chain.py",
    "tests/pipelines/test_sweeps.py",
    "tests/pipelines/test_workload_chain.py",
    "tests/report/test_browser.py",
    "tests/report/test_cli.py",
    "tests/report/test_frontier_report.py",
    "tests/report/test_html.py",
    "tests/report/test_plots.py",
    "tests/report/test_reasoning_report.py",
    "tests/report/test_reasoning_drafts_context_report.py",
    "tests/telemetry/test_report_telemetry.py",
    "tests/telemetry/test_sampler.py",
    "tests/telemetry/test_telemetry_metrics.py",
})


def pytest_collection_modifyitems(config, items):
    root = config.rootpath
    missing = {f for f in HEAVY_FILES if not (root / f).exists()}
    if missing:  # a renamed file would silently join the inner loop
        raise pytest.UsageError(f"tests/conftest.py HEAVY_FILES names missing files: {sorted(missing)}")
    for item in items:
        if item.path.relative_to(root).as_posix() in HEAVY_FILES:
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    # An xdist worker whose session is over (its results already sent) leaves at once. The
    # interpreter's own teardown of a worker that has imported Dagster, Great Expectations,
    # pandas and matplotlib, and joined whatever threads remain, took seconds, and the
    # parallel pass ends only when its last worker has gone. A worker with a child process
    # of multiprocessing's still alive exits the usual way, whose handler ends it.
    if hasattr(config, "workerinput") and not multiprocessing.active_children():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

