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


# The files that take longest (wall seconds of a pass on a 2-core machine, 2026-12-05), longest
# first: each pass starts them before every other file. With --no-loadscope-reorder (the
# Makefile's) xdist hands files to its workers in collection order, one to each in turn, so
# these start at once, one or two a worker, and the many short files fill in around them.
# xdist's own order (files with the most tests first) started the single-test chains last:
# one of them (a PostgreSQL fleet run, a real vLLM) ran alone at the end of the pass for
# ~25 s on one core while the other stayed idle. Only the order changes, never what runs.
LONGEST_FIRST = (
    "tests/engine/test_vllm_lifecycle.py",  # 76 s: three starts of real vLLM
    "tests/engine/test_vllm_live.py",  # 47-77 s: one start, then its requests
    "tests/fleet/test_fleet_pools_postgres.py",  # 50-77 s: three chains through a daemon
    "tests/fleet/test_fleet_pools.py",  # 47-56 s: the same on SQLite
    "tests/loadgen/test_workloads.py",  # the serial pass's longest (14 s)
    "tests/episodes/test_spike_scale_up.py",  # the serial pass's second (11 s)
    "tests/report/test_episode_report.py",  # 30-62 s
    "tests/pipelines/test_signals.py",  # 30-43 s: a chain killed in each phase
    "tests/engine/test_llamacpp.py",  # 37-40 s
    "tests/pipelines/test_e2e_webserver.py",  # 28-38 s
    "tests/pipelines/test_sweep_chain.py",  # 32-38 s
    "tests/loadgen/test_workers.py",  # 18-32 s, and 8 s of the serial pass
    "tests/loadgen/test_ladder.py",  # 26 s
    "tests/episodes/test_spot_interruptions.py",  # 23-27 s
)


def pytest_collection_modifyitems(config, items):
    root = config.rootpath
    missing = {f for f in {*HEAVY_FILES, *LONGEST_FIRST} if not (root / f).exists()}
    if missing:  # a renamed file would silently join the inner loop, or lose its place
        raise pytest.UsageError(f"tests/conftest.py HEAVY_FILES or LONGEST_FIRST names "
                                f"missing files: {sorted(missing)}")
    first = {f: i for i, f in enumerate(LONGEST_FIRST)}
    place = {}
    for item in items:
        path = item.path.relative_to(root).as_posix()
        if path in HEAVY_FILES:
            item.add_marker(pytest.mark.slow)
        place[item.nodeid] = first.get(path, len(first))
    # a stable sort: every other file keeps its place, and a file's tests their order
    items.sort(key=lambda item: place[item.nodeid])


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

