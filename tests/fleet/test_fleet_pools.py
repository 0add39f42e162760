"""Quota-aware concurrency: candidates sharing a pool never hold nodes at the same time,
while other pools run beside them, on an instance on SQLite and on PostgreSQL; the pools'
limits come from the candidates file (into the instance's run queue and the Helm values),
and the bill refresh and reaper jobs never wait on them."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
import yaml
from servingbench.assets.pools import POOL_TAG, helm_run_coordinator, write_instance_config
from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.config import ConfigError
from servingbench.resources.contract.timestamps import parse_ts

from tests.support.fleet import candidates_file, fleet_takes_turns, intervals

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(900)  # three full chains, two of them in turn, on a shared 2-core machine
def test_p5_runs_never_overlap_while_g6e_runs_beside_them(tmp_path, monkeypatch, capsys):
    """On an on-disk (SQLite) instance, as `servingbench run --all` makes locally; the same on
    PostgreSQL, as deployed, is test_fleet_pools_postgres.py."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    fleet_takes_turns(tmp_path, home, monkeypatch, capsys)


def test_only_benchmark_runs_carry_a_pool(tmp_path):
    """The queue's limits hold benchmark runs back by their pool tag; the bill refresh and the
    reaper carry none, so a full pool never makes them wait."""
    from servingbench.pipelines.definitions import build_definitions
    from servingbench.pipelines.profiles import Settings

    defs = build_definitions(Settings(data_dir=tmp_path))
    key = "p5-scout-bf16-tp8|2026-11-29"

    def tags(job: str) -> dict:
        config = defs.resolve_job_def(job).partitioned_config
        return config.get_tags_for_partition_key(key) if config else {}
    assert tags("benchmark_job")[POOL_TAG] == "p5"
    assert POOL_TAG not in tags("bill_refresh_job")
    result = defs.resolve_job_def("reaper_job").execute_in_process(
        instance=dg.DagsterInstance.ephemeral())
    assert result.success and POOL_TAG not in result.dagster_run.tags


def test_pools_from_the_file(tmp_path):
    cands = {c.name: c for c in load_candidates(candidates_file(
        tmp_path, {"p5-a": "p5.48xlarge", "g6e-a": "g6e.48xlarge", "inf2-a": "inf2.48xlarge"},
        pools="{p5: 1, g6e: 2, cr-01: 1}", extra={"inf2-a": "pool: cr-01"}))}
    assert (cands["p5-a"].pool, cands["p5-a"].pool_limit) == ("p5", 1)
    assert (cands["g6e-a"].pool, cands["g6e-a"].pool_limit) == ("g6e", 2)
    assert (cands["inf2-a"].pool, cands["inf2-a"].pool_limit) == ("cr-01", 1)
    free = load_candidates(candidates_file(tmp_path, {"p4d-a": "p4d.24xlarge"}, pools="{p5: 1}"))
    assert (free[0].pool, free[0].pool_limit) == (None, None)


@pytest.mark.parametrize("pools, extra, message", [
    ("[p5, 1]", None, r"c\.yaml\.pools: expected a mapping of pool name to limit"),
    ("{p5: 0}", None, r"pools\.p5: expected a positive integer .*got 0"),
    ("{p5: two}", None, r"pools\.p5: expected a positive integer .*got 'two'"),
    ("{p5: true}", None, r"pools\.p5: expected a positive integer"),
    ("{'p5 west': 1}", None, r"pools: 'p5 west' is not a name"),
    ("{p5: 1}", "pool: p6", r"candidates\[0\]\.pool: 'p6' is not in pools \(p5\)"),
    ("{p5: 1}", "pool: 5", r"candidates\[0\]\.pool: expected a name from `pools`"),
])
def test_bad_pools_are_clear_errors(tmp_path, pools, extra, message):
    with pytest.raises(ConfigError, match=message):
        load_candidates(candidates_file(tmp_path, {"p5-a": "p5.48xlarge"}, pools=pools,
                                        extra={"p5-a": extra} if extra else None))


def test_the_pool_record_spans_provision_to_teardown(tmp_path):
    from servingbench.pipelines.profiles import Settings
    from servingbench.resources.loadgen.generator import LoadGenerator

    from tests.support.chain import run_job

    settings = Settings(data_dir=tmp_path, time_scale=0.2, cold_start_s=0.2,
                        load=LoadGenerator(concurrency=(1,), requests_per_step=3,
                                          warmup_requests=1, output_tokens=8, input_tokens=32))
    (tmp_path / "home").mkdir()
    instance = dg.DagsterInstance.local_temp(str(tmp_path / "home"))
    result, _ = run_job(tmp_path, settings=settings, instance=instance)
    assert result.success
    spans = intervals(tmp_path / "runs")
    (start, end), = spans.values()
    (run_dir,) = (tmp_path / "runs").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert start == parse_ts(manifest["phases"]["provision"]["started_at"])
    assert end >= parse_ts(manifest["phases"]["steady"]["ended_at"])
    # executed in-process, the run carried its pool's tag but never passed through the
    # queue: its record says so (and its log warns)
    record = json.loads((run_dir / "pool.json").read_text())
    assert (record["pool"], record["limit"], record["queued"]) == ("p5", 1, False)
    assert result.dagster_run.tags[POOL_TAG] == "p5"


def test_the_pools_limits_go_into_the_instance_s_run_queue(tmp_path, monkeypatch):
    """write_instance_config puts the file's limits into dagster.yaml, keeps what else is
    there (another tag's limit, the storage), replaces a pool's limit instead of doubling
    it, and Dagster's own queued run coordinator reads them."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump({
        "telemetry": {"enabled": False},
        "concurrency": {"runs": {"max_concurrent_runs": 5, "tag_concurrency_limits": [
            {"key": "team", "value": "docs", "limit": 1},
            {"key": POOL_TAG, "value": "p5", "limit": 7}]}}}))
    cands = load_candidates(candidates_file(
        tmp_path, {"p5-a": "p5.48xlarge", "g6e-a": "g6e.48xlarge", "p4d-a": "p4d.24xlarge"},
        pools="{p5: 1, g6e: 2}"))
    write_instance_config(home, cands)
    write_instance_config(home, cands)  # again: nothing doubles
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.get() as instance:
        queue = instance.get_concurrency_config().run_queue_config
    assert queue.max_concurrent_runs == 5
    assert list(queue.tag_concurrency_limits) == [
        {"key": "team", "value": "docs", "limit": 1},
        {"key": POOL_TAG, "value": "g6e", "limit": 2}, {"key": POOL_TAG, "value": "p5", "limit": 1}]


def test_the_helm_values_hold_the_candidates_file_s_pools():
    """deploy/values.yaml's run queue has exactly the shipped candidates file's pools."""
    values = yaml.safe_load((REPO / "deploy" / "values.yaml").read_text())
    coordinator = values["dagsterDaemon"]["runCoordinator"]
    cands = load_candidates(REPO / "pipelines" / "candidates.yaml")
    expected = helm_run_coordinator(cands, coordinator["config"]["queuedRunCoordinator"][
        "maxConcurrentRuns"])
    assert coordinator == expected
