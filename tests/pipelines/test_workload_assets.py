"""A batch job's job.json and an SLO search's slo_capacity.json (contract §3.4, §3.5) in the
Dagster asset metadata, and the search's SLO cost in the headline (asset metadata and the
DuckDB file): benchmark_job replays a hand-computed search through the real chain, and the
same metadata function takes a hand-computed batch job."""

from __future__ import annotations

import duckdb
import pytest
from servingbench.assets.metrics import workload_metadata
from servingbench.resources.analysis.analyze import analyze_run

from tests.support.chain import materialized, run_job
from tests.support.replay import RecordedBill, ReplayCluster, ReplayLoad, ReplayModelServer
from tests.support.runbuilder import RunBuilder

pytestmark = pytest.mark.slow  # a chain, a job or processes: not in `make check`

HOURLY = 55.04


def _replay(rec) -> dict:
    return {"cluster": ReplayCluster(rec), "model_server": ReplayModelServer(rec),
            "load_generator": ReplayLoad(rec), "bill_source": RecordedBill(rec)}


def test_search_capacity_and_slo_cost_in_the_metadata_and_the_store(tmp_path):
    # rate=1, 2 met; rate=4 missed; rate=3 met: capacity 3, bracket [3, 4]. The capacity
    # step's window is 0.37 s with 6 output tokens: 55.04 × 0.37 / 3600 / 6 × 1e6 USD per 1M.
    b = RunBuilder(run_id="rec-search")
    b.slo_search_probes()
    b.hourly_bill()
    rec = b.write(tmp_path / "recording")
    result, _ = run_job(tmp_path / "data", resources=_replay(rec))
    assert result.success
    md = materialized(result)
    expected = HOURLY * 0.37 / 3600 / 6 * 1e6
    dm = md["derived_metrics"]
    assert dm["slo_capacity"]["capacity"] == 3.0 and dm["slo_capacity"]["interval"] == [3.0, 4.0]
    assert [p["step"] for p in dm["slo_capacity"]["probes"]] == ["rate=1", "rate=2", "rate=4",
                                                                 "rate=3"]
    assert dm["slo_cost_per_1m_output_usd"] == pytest.approx(expected)
    assert "capacity: 3 req/s, bracket [3, 4]" in dm["slo_search"]
    assert "job" not in dm
    assert "SLO cost USD / 1M out" in md["cost_per_1m_output_tokens"]["headline"]
    con = duckdb.connect(str(tmp_path / "data" / "servingbench.duckdb"), read_only=True)
    ((step, cost),) = con.execute("SELECT slo_search_step, slo_search_cost_per_1m_output_usd "
                                  "FROM headline").fetchall()
    con.close()
    assert step == "rate=3" and cost == pytest.approx(expected)


def test_batch_job_in_the_metadata(tmp_path):
    # The job run above proves derived_metrics hands its analysis to workload_metadata and
    # the search's cost reaches the headline; a batch job's metadata is that function's other
    # branch, on the folder a replay would analyse (the recording itself): a second job run
    # would prove the wiring again. makespan 3.6 s, 10 output tokens, the job window at
    # 55.04 USD/h: 55.04 × 3.6 / 3600
    b = RunBuilder(run_id="rec-batch")
    b.manifest["scenario"] = {"kind": "batch", "requests": 3, "max_in_flight": 2,
                              "input_tokens": 4096, "output_tokens": 64}
    b.request("c=2", sent=1000, chunks=[(2000, 1), (2100, 1), (2200, 1)], finished=2200)
    b.request("c=2", sent=1000, chunks=[(3000, 1), (3100, 1)], finished=3100, sched=1000)
    b.request("c=2", sent=2200, chunks=[(4000, 2), (4500, 3)], finished=4600, sched=2200)
    b.hourly_bill()
    run_dir = b.write(tmp_path / "recording")
    result = analyze_run(run_dir)
    assert result.exit_code == 0, result.message
    dm = {k: v.value for k, v in workload_metadata(result, run_dir).items()}
    assert dm["job"]["makespan_s"] == pytest.approx(3.6) and dm["job"]["output_tokens"] == 10
    assert dm["job"]["cost_per_job_usd"] == pytest.approx(HOURLY * 3.6 / 3600)
    assert "makespan s" in dm["job_summary"] and "slo_capacity" not in dm
