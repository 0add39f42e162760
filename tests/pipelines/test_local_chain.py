"""The real chain on the local profile: the emulator as a real server process (time-scaled),
the load generator over loopback, the price sheet as the bill."""

from __future__ import annotations

import json
import os

import dagster as dg
import duckdb
import pyarrow.parquet as pq
import pytest
from servingbench.assets.benchmark import RUN_TAG
from servingbench.pipelines.profiles import Settings
from servingbench.resources.loadgen.generator import LoadGenerator

from tests.support.chain import checks, materialized, run_job

pytestmark = pytest.mark.slow  # a chain, a job or processes: not in `make check`

QUICK = LoadGenerator(concurrency=(1, 2), requests_per_step=6, warmup_requests=2,
                     output_tokens=16, input_tokens=64)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_local_chain_end_to_end_is_emulated_and_separates_warmup(tmp_path):
    settings = Settings(data_dir=tmp_path, time_scale=0.2, cold_start_s=0.2, load=QUICK)
    instance = dg.DagsterInstance.ephemeral()
    result, _ = run_job(tmp_path, settings=settings, instance=instance)
    assert result.success, [e.event_specific_data.error.message for e in result.all_events
                            if e.is_step_failure]
    found = checks(result)
    # quality parity is not applicable to an emulated run: never a pass, never a block
    assert found.pop("quality_matches_reference") is False
    assert all(found.values())
    md = materialized(result)
    run_dir = tmp_path / "runs" / md["provisioned_cluster"]["run_dir"].rsplit("/", 1)[-1]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["source"] == "emulated"
    # the Dagster run names the servingbench run, so the reaper can ask if it is over
    assert instance.get_run_by_id(result.run_id).tags[RUN_TAG] == manifest["run_id"]
    assert md["quality"]["status"] == "not applicable: emulated run"
    assert not (run_dir / "quality.parquet").exists()
    assert not (run_dir / "quality_summary.json").exists()
    assert md["deployed_model"]["source"] == "emulated"
    assert "weights_load" in manifest["phases"] and "steady" in manifest["phases"]
    warm = pq.read_table(run_dir / "warmup_log.parquet").to_pylist()
    steady = pq.read_table(run_dir / "steady_state_request_log.parquet").to_pylist()
    assert len(warm) == 2 and {r["phase"] for r in warm} == {"warmup"}
    assert len(steady) == 12 and {r["phase"] for r in steady} == {"steady"}
    assert not {r["request_id"] for r in warm} & {r["request_id"] for r in steady}
    assert max(r["finished_at"] for r in warm) <= min(r["sent_at"] for r in steady)
    for name in ("derived_metrics", "cost_per_1m", "headline"):
        sources = set(pq.read_table(run_dir / f"{name}.parquet")["source"].to_pylist())
        assert sources == {"emulated"}, name
    # the frontier and the what-if costs (contract §3.6, §4.1): in the folder, the DuckDB
    # file and the cost asset's metadata, the interactivity levels beside the headline
    assert {b["price_source"] for b in manifest["price_bases"]} == {"price_sheet"}
    what_if = pq.read_table(run_dir / "cost_what_if.parquet")
    assert what_if.num_rows == 2 * len(manifest["price_bases"])  # 2 steps × the sheet's bases
    cost_md = md["cost_per_1m_output_tokens"]
    assert "EMULATED" in cost_md["interactivity_levels"] and "WHAT-IF" in cost_md["cost_what_if"]
    con = duckdb.connect(str(tmp_path / "servingbench.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM frontier").fetchall() == [(2,)]
        assert con.execute("SELECT count(*) FROM frontier_levels").fetchall() == [(6,)]
    finally:
        con.close()
    # the emulator process is gone
    pid = json.loads((run_dir / "deployment.json").read_text())["pid"]
    assert _gone(pid)


def test_emulator_and_cluster_are_torn_down_when_the_load_fails(tmp_path, monkeypatch):
    """On a Neuron candidate, whose deployment records a compile phase: the deployment is
    complete (and materialized) before the load starts, so a load that fails at once shows
    it as well as a whole chain would."""
    monkeypatch.delenv("SB_TEST_NO_SUCH_KEY", raising=False)
    failing = LoadGenerator(concurrency=(1,), requests_per_step=2, warmup_requests=0,
                           output_tokens=4, api_key_env="SB_TEST_NO_SUCH_KEY")
    torn = []
    from servingbench.resources.cluster.local import LocalHostCluster

    class WatchedCluster(LocalHostCluster):
        def teardown(self, info):
            torn.append(info)

    settings = Settings(data_dir=tmp_path, time_scale=0.2, cold_start_s=0.3, load=failing)
    result, _ = run_job(tmp_path, candidate="trn2-scout-bf16-tp16", settings=settings,
                        resources={"cluster": WatchedCluster()})
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert "SB_TEST_NO_SUCH_KEY" in failure.event_specific_data.error.message
    assert len(torn) == 1
    (run_dir,) = list((tmp_path / "runs").iterdir())
    pid = json.loads((run_dir / "deployment.json").read_text())["pid"]
    assert _gone(pid)
    md = materialized(result)
    assert "cost_per_1m_output_tokens" not in md
    deployed = md["deployed_model"]
    assert "cold_start_compile_s" in deployed and "cold_start_weights_load_s" in deployed
    assert "compile" in json.loads((run_dir / "manifest.json").read_text())["phases"]
