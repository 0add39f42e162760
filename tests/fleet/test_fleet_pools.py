"""Quota-aware concurrency: candidates sharing a pool never hold nodes at the same time,
while other pools run beside them; the pools' limits come from the candidates file, and the
bill refresh and reaper jobs never wait on them."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.cli import main as cli
from servingbench.pipelines.config import ConfigError
from servingbench.resources.contract.timestamps import parse_ts

from tests.support.fleet import candidates_file, intervals

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(900)  # three full chains, two of them in turn, on a shared 2-core machine
def test_p5_runs_never_overlap_while_g6e_runs_beside_them(tmp_path, monkeypatch, capsys):
    """Three real run processes on one on-disk Dagster instance (`run --all --parallel 3`).
    The runs are the processes that must stay apart; the command that starts them is called
    in-process (a fourth interpreter importing Dagster would prove nothing more), its
    environment the one the run processes inherit."""
    cands = candidates_file(tmp_path, {"p5-a": "p5.48xlarge", "p5-b": "p5.48xlarge",
                                       "g6e-a": "g6e.48xlarge"},
                            pools="{p5: 1, g6e: 2}", requests=4)
    env = {"DAGSTER_HOME": str(tmp_path / "home"),
           "SERVINGBENCH_DATA_DIR": str(tmp_path / "data"), "SERVINGBENCH_CANDIDATES": str(cands),
           "SERVINGBENCH_EMULATOR_TIME_SCALE": "0.3", "SERVINGBENCH_EMULATOR_COLD_START_S": "0.2"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SERVINGBENCH_PROFILE", raising=False)
    monkeypatch.chdir(REPO)
    rc = cli(["run", "--all", "--parallel", "3", "--date", "2026-11-29"])
    out = capsys.readouterr()
    assert rc == 0, out.out[-3000:] + out.err[-3000:]
    assert "3 of 3 candidates" in out.out, out.out[-3000:]
    assert "pools g6e: 2, p5: 1" in out.out
    spans = intervals(tmp_path / "data" / "runs")
    assert sorted(spans) == ["g6e-a", "p5-a", "p5-b"]
    (a0, a1), (b0, b1) = sorted([spans["p5-a"], spans["p5-b"]])
    assert a1 <= b0, "the two p5 runs held nodes at the same time"
    g0, g1 = spans["g6e-a"]
    assert g0 < b1 and a0 < g1 and (g0 < a1 or b0 < g1), "g6e did not run beside the p5 runs"


def test_a_full_pool_blocks_benchmarks_but_not_the_reaper_or_bill_refresh(tmp_path):
    from servingbench.pipelines.definitions import build_definitions
    from servingbench.pipelines.profiles import Settings

    defs = build_definitions(Settings(data_dir=tmp_path))
    for name in ("reaper_job", "bill_refresh_job"):
        job = defs.resolve_job_def(name)
        assert not any(node.definition.pools for node in job.nodes_in_topological_order), name
    instance = dg.DagsterInstance.ephemeral()
    instance.event_log_storage.set_concurrency_slots("p5", 1)
    claim = instance.event_log_storage.claim_concurrency_slot("p5", "someone-else", "benchmark_run")
    assert claim.is_claimed
    result = defs.resolve_job_def("reaper_job").execute_in_process(instance=instance)
    assert result.success


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
    import json
    (run_dir,) = (tmp_path / "runs").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert start == parse_ts(manifest["phases"]["provision"]["started_at"])
    assert end >= parse_ts(manifest["phases"]["steady"]["ended_at"])
    # the slot was given back
    info = instance.event_log_storage.get_concurrency_info("p5")
    assert (info.slot_count, info.claimed_slots) == (1, [])


def _sync_at(home: str, start: float, pool: str, limit: int) -> None:
    import os
    import time

    from servingbench.assets.pools import sync_limit
    os.environ["DAGSTER_HOME"] = home
    instance = dg.DagsterInstance.get()
    while time.time() < start:  # every process sets the count at the same moment
        pass
    sync_limit(instance, pool, limit)


def test_runs_setting_a_pools_count_together_make_exactly_its_limit(tmp_path, monkeypatch):
    """Runs started together each bring their pool's slot count in line at once; on an
    on-disk instance that must make one slot for a limit of 1 and fail none of them (without
    the lock, some attempts failed on the limit row's unique constraint, and a fleet run once
    got two slots for a pool of one)."""
    import multiprocessing
    import time

    ctx = multiprocessing.get_context("fork")  # Dagster is imported already: children start fast
    for trial in range(4):
        home = tmp_path / f"home{trial}"
        home.mkdir()
        (home / "dagster.yaml").write_text("")
        monkeypatch.setenv("DAGSTER_HOME", str(home))
        instance = dg.DagsterInstance.get()  # made (and migrated) once, before the race
        instance.event_log_storage.get_concurrency_info("p5")
        start = time.time() + 0.5
        procs = [ctx.Process(target=_sync_at, args=(str(home), start, "p5", 1)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0] * 4, trial
        assert instance.event_log_storage.get_concurrency_info("p5").slot_count == 1, trial
