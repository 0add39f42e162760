"""contract §3.1, §3.4, §3.5 on hand-computed run folders: the by-cache split, a batch
job's job.json, and an SLO search's slo_capacity.json."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from servingbench.resources.analysis.analyze import analyze_run

from tests.support.runbuilder import RunBuilder


def _cached(b: RunBuilder, n: int | None) -> None:
    b.requests[-1]["cached_tokens"] = n


def test_cache_hits_misses_and_unknowns_are_never_pooled(tmp_path):
    b = RunBuilder()
    b.request("c=2", sent=1000, chunks=[(1100, 1), (1110, 1)], finished=1120)  # miss: ttft 100
    _cached(b, 0)
    b.request("c=2", sent=1000, chunks=[(1300, 1), (1310, 1)], finished=1320)  # miss: ttft 300
    _cached(b, 0)
    b.request("c=2", sent=1200, chunks=[(1220, 1), (1230, 1)], finished=1240)  # hit: ttft 20
    _cached(b, 496)
    b.request("c=2", sent=1320, chunks=[(1360, 1)], finished=1400)  # hit: ttft 40
    _cached(b, 16)
    b.request("c=2", sent=1400, chunks=[(1450, 1)], finished=1460)  # unknown: ttft 50
    b.request("c=2", sent=1400, status="timeout", finished=1500)  # unknown, not ok
    b.hourly_bill()
    run = b.write(tmp_path / "run")
    assert analyze_run(run).exit_code == 0
    rows = {r["cache"]: r for r in pq.read_table(run / "derived_metrics_by_cache.parquet").to_pylist()}
    assert set(rows) == {"hit", "miss", "unknown"}
    assert (rows["miss"]["n_requests"], rows["miss"]["n_ok"]) == (2, 2)
    assert rows["miss"]["ttft_s_mean"] == pytest.approx(0.2)
    assert rows["miss"]["ttft_s_p50"] == pytest.approx(0.2)  # (0.1 + 0.3) / 2
    assert rows["miss"]["e2e_s_max"] == pytest.approx(0.32)
    assert rows["hit"]["ttft_s_min"] == pytest.approx(0.02)
    assert rows["hit"]["ttft_s_max"] == pytest.approx(0.04)
    assert rows["hit"]["ttft_s_p99"] == pytest.approx(0.02 + 0.99 * 0.02)
    assert (rows["unknown"]["n_requests"], rows["unknown"]["n_ok"]) == (2, 1)
    assert rows["unknown"]["ttft_s_n"] == 1 and rows["unknown"]["ttft_s_mean"] == pytest.approx(0.05)
    assert all(r["run_id"] == "run-1" and r["step"] == "c=2" for r in rows.values())


def test_one_cache_class_gives_the_step_metrics_statistics_exactly(tmp_path):
    # metrics_by_cache.sql repeats step_metrics.sql's TTFT/E2E block (the loader has no
    # includes): with every request in one class the two must agree to the last bit
    b = RunBuilder()
    for i, (ttft, e2e) in enumerate([(100, 150), (300, 330), (20, 90), (40, 41), (75, 200)]):
        sent = 1000 + 10 * i
        b.request("c=2", sent=sent, chunks=[(sent + ttft, 1), (sent + ttft + 1, 1)],
                  finished=sent + e2e)
        _cached(b, 0)
    b.request("c=2", sent=1100, status="timeout", finished=1500)
    _cached(b, 0)
    b.hourly_bill()
    run = b.write(tmp_path / "run")
    assert analyze_run(run).exit_code == 0
    [step] = pq.read_table(run / "derived_metrics.parquet").to_pylist()
    [miss] = pq.read_table(run / "derived_metrics_by_cache.parquet").to_pylist()
    assert miss["cache"] == "miss"
    for name in ("n_requests", "n_ok"):
        assert miss[name] == step[name]
    for measure in ("ttft_s", "e2e_s"):
        for stat in ("p50", "p90", "p95", "p99", "mean", "min", "max", "n"):
            assert miss[f"{measure}_{stat}"] == step[f"{measure}_{stat}"], (measure, stat)


def test_a_class_without_ok_requests_has_n_zero_and_null_statistics(tmp_path):
    b = RunBuilder()
    b.request("c=1", sent=0, chunks=[(10, 1)], finished=20)
    _cached(b, 0)
    for k in range(100):  # keeps the error rate at 1 %: the step stays valid
        b.request("c=1", sent=20 + k, chunks=[(40 + k, 1)], finished=50 + k)
        _cached(b, 0)
    b.request("c=1", sent=30, status="http_error", finished=31)
    _cached(b, 32)
    run = b.write(tmp_path / "run", bill=False)
    analyze_run(run)
    hit = [r for r in pq.read_table(run / "derived_metrics_by_cache.parquet").to_pylist()
           if r["cache"] == "hit"][0]
    assert (hit["n_requests"], hit["n_ok"], hit["ttft_s_n"]) == (1, 0, 0)
    assert hit["ttft_s_p50"] is None and hit["e2e_s_mean"] is None


def test_old_logs_without_the_optional_columns_are_all_unknown(tmp_path):
    b = RunBuilder()
    b.request("c=1", sent=0, chunks=[(10, 1)], finished=20)
    run = b.write(tmp_path / "run", bill=False)
    table = pq.read_table(run / "steady_state_request_log.parquet")
    pq.write_table(table.drop_columns(["worker", "session_id", "turn", "cached_tokens"]),
                   run / "steady_state_request_log.parquet")
    assert analyze_run(run).exit_code == 0
    rows = pq.read_table(run / "derived_metrics_by_cache.parquet").to_pylist()
    assert [(r["cache"], r["n_requests"]) for r in rows] == [("unknown", 1)]


def test_batch_job_makespan_throughput_and_cost_from_a_hand_computed_bill(tmp_path):
    # The job: 3 requests at most 2 in flight. First sent at 1,000 ms, last finished at
    # 4,600 ms: makespan 3.6 s. 3 + 2 + 5 = 10 output tokens: 10 / 3.6 tok/s.
    # Bill: one hour at $36/h for the one node: the 3.6 s window costs 36 × 3.6 / 3600 = $0.036.
    b = RunBuilder(hourly=36.0)
    b.manifest["scenario"] = {"kind": "batch", "requests": 3, "max_in_flight": 2,
                              "input_tokens": 4096, "output_tokens": 64}
    b.request("c=2", sent=1000, chunks=[(2000, 1), (2100, 1), (2200, 1)], finished=2200)
    b.request("c=2", sent=1000, chunks=[(3000, 1), (3100, 1)], finished=3100, sched=1000)
    b.request("c=2", sent=2200, chunks=[(4000, 2), (4500, 3)], finished=4600, sched=2200)
    b.hourly_bill(rate=36.0)
    run = b.write(tmp_path / "run")
    assert analyze_run(run).exit_code == 0
    job = json.loads((run / "job.json").read_text())
    assert job["requests"] == 3 and job["ok"] == 3
    assert job["makespan_s"] == pytest.approx(3.6)
    assert job["output_tokens"] == 10
    assert job["output_tok_s"] == pytest.approx(10 / 3.6)
    assert job["window_cost_usd"] == pytest.approx(0.036)
    assert job["cost_per_job_usd"] == pytest.approx(0.036)


def test_batch_job_without_a_bill_has_null_cost(tmp_path):
    b = RunBuilder()
    b.manifest["scenario"] = {"kind": "batch", "requests": 1, "max_in_flight": 1}
    b.request("c=1", sent=0, chunks=[(10, 1)], finished=20)
    run = b.write(tmp_path / "run", bill=False)
    analyze_run(run)
    job = json.loads((run / "job.json").read_text())
    assert job["window_cost_usd"] is None and job["cost_per_job_usd"] is None
    assert not (tmp_path / "other" / "job.json").exists()


def test_slo_capacity_from_the_probes_in_the_order_they_ran(tmp_path):
    # rate=1 met, rate=2 met, rate=4 missed TTFT, rate=3 met: capacity 3, bracket [3, 4]
    b = RunBuilder()
    b.slo_search_probes()
    run = b.write(tmp_path / "run", bill=False)
    assert analyze_run(run).exit_code == 0
    cap = json.loads((run / "slo_capacity.json").read_text())
    assert cap["slo"] == {"ttft_p99_s": 0.5, "tpot_p99_s": 0.1} and cap["load_mode"] == "rate"
    assert [(p["step"], p["target"], p["valid"], p["met"]) for p in cap["probes"]] == [
        ("rate=1", 1.0, True, True), ("rate=2", 2.0, True, True),
        ("rate=4", 4.0, True, False), ("rate=3", 3.0, True, True)]
    assert cap["capacity"] == 3.0 and cap["interval"] == [3.0, 4.0]


def _search_run(b: RunBuilder, steps=(("rate=1", 100), ("rate=2", 200), ("rate=4", 900),
                                      ("rate=3", 300))) -> None:
    b.manifest["scenario"] = {"kind": "slo_search", "slo": {"ttft_p99_s": 0.5, "tpot_p99_s": 0.1},
                              "max_probes": 8, "start_rate": 1.0}
    t = 0
    for step, ttft in steps:
        for _ in range(3):
            b.request(step, sched=t, sent=t, chunks=[(t + ttft, 1), (t + ttft + 50, 1)],
                      finished=t + ttft + 50)
            t += 10
        t += 2000


def test_slo_cost_is_the_cost_at_capacity_from_a_hand_computed_bill(tmp_path):
    # Capacity rate=3 (as above). Its 3 requests are sent at 6,090, 6,100 and 6,110 ms and
    # the last finishes at 6,110 + 300 + 50 = 6,460 ms: a 0.37 s window of a $36/h node costs
    # 36 × 0.37 / 3600 = $0.0037, for 3 × 2 = 6 output tokens: $616.67 per 1M output tokens.
    b = RunBuilder(hourly=36.0)
    _search_run(b)
    b.hourly_bill(rate=36.0)
    run = b.write(tmp_path / "run")
    a = analyze_run(run)
    assert a.exit_code == 0
    heads = pq.read_table(run / "headline.parquet").to_pylist()
    assert len(heads) == 1
    (h,) = heads
    assert h["slo_search_capacity"] == 3.0 and h["slo_search_step"] == "rate=3"
    assert h["slo_search_cost_per_1m_output_usd"] == pytest.approx(36 * 0.37 / 3600 / 6 * 1e6)
    cost = {r["step"]: r for r in pq.read_table(run / "cost_per_1m.parquet").to_pylist()}
    assert h["slo_search_cost_per_1m_output_usd"] == cost["rate=3"]["cost_per_1m_output_usd"]
    # the terminal summary shows the probes, the capacity, its bracket and the SLO cost
    from servingbench.resources.analysis.summary import render

    text = render(a)
    assert "SLO capacity search (contract §3.5, slo_capacity.json)" in text
    assert "capacity: 3 req/s, bracket [3, 4]" in text
    assert "SLO cost: 616.6667 USD / 1M output tokens at capacity" in text
    assert "rate=4" in text.split("SLO capacity search")[1]
    assert "SLO cost USD / 1M out" in text  # the headline table's optional column


def test_a_search_that_never_met_has_no_capacity_and_no_slo_cost(tmp_path):
    b = RunBuilder()
    _search_run(b, steps=(("rate=1", 900), ("rate=0.5", 800)))
    b.hourly_bill()
    run = b.write(tmp_path / "run")
    a = analyze_run(run)
    (h,) = pq.read_table(run / "headline.parquet").to_pylist()
    assert a.slo_capacity["capacity"] is None and a.slo_capacity["interval"] == [None, 0.5]
    assert (h["slo_search_capacity"], h["slo_search_step"],
            h["slo_search_cost_per_1m_output_usd"]) == (None, None, None)
    from servingbench.resources.analysis.summary import render

    assert "capacity: none - no probe was valid and met the SLO" in render(a)


def test_a_run_without_a_search_has_the_search_columns_all_null(tmp_path):
    from tests.support.runbuilder import clean_run

    run = clean_run().write(tmp_path / "run")
    a = analyze_run(run)
    assert a.exit_code == 0 and a.slo_capacity is None and a.job is None
    table = pq.read_table(run / "headline.parquet")
    assert table.column_names[-3:] == ["slo_search_capacity", "slo_search_step",
                                       "slo_search_cost_per_1m_output_usd"]
    assert table.column("slo_search_capacity").to_pylist() == [None]
    from servingbench.resources.analysis.summary import render

    text = render(a)
    assert "search capacity" not in text and "Batch job" not in text
    assert "SLO capacity search" not in text


def test_the_summary_shows_a_batch_jobs_makespan_and_cost(tmp_path):
    b = RunBuilder(hourly=36.0)
    b.manifest["scenario"] = {"kind": "batch", "requests": 3, "max_in_flight": 2,
                              "input_tokens": 4096, "output_tokens": 64}
    b.request("c=2", sent=1000, chunks=[(2000, 1), (2100, 1), (2200, 1)], finished=2200)
    b.request("c=2", sent=1000, chunks=[(3000, 1), (3100, 1)], finished=3100, sched=1000)
    b.request("c=2", sent=2200, chunks=[(4000, 2), (4500, 3)], finished=4600, sched=2200)
    b.hourly_bill(rate=36.0)
    a = analyze_run(b.write(tmp_path / "run"))
    from servingbench.resources.analysis.summary import render

    text = render(a).split("Batch job (contract §3.4, job.json)")[1]
    # makespan 3.6 s, 10 tokens, $0.036 for the job (the hand-computed bill above)
    assert "3.600" in text and "10" in text and "0.036000" in text


def test_demo_prints_the_search_and_the_job_beside_an_older_headline(tmp_path, capsys):
    from servingbench.pipelines.cli.demo import print_headline

    from tests.support.runbuilder import clean_run

    search = RunBuilder(run_id="search-1", hourly=36.0)
    search.manifest["candidate"] = "searcher"
    _search_run(search)
    search.hourly_bill(rate=36.0)
    s_dir = search.write(tmp_path / "search")
    old = clean_run().write(tmp_path / "old")
    assert analyze_run(s_dir).exit_code == 0 and analyze_run(old).exit_code == 0
    # a headline written before the optional search columns existed
    table = pq.read_table(old / "headline.parquet")
    pq.write_table(table.drop_columns([c for c in table.column_names if c.startswith("slo_search_")]),
                   old / "headline.parquet")
    print_headline([str(old), str(s_dir)])
    out = capsys.readouterr().out
    assert "SLO cost USD / 1M out" in out and "616.6667" in out
    assert "searcher: SLO capacity search (slo_capacity.json)" in out
    assert "capacity: 3 req/s, bracket [3, 4]" in out


def test_the_step_reader_asks_what_the_run_needs_of_the_records_so_far(tmp_path):
    """The one reader the chain and `servingbench load` hand the load generator: an SLO
    search's probe verdicts, a ladder's validity and tok/s, nothing for other kinds."""
    from servingbench.resources.analysis.workload_outputs import step_reader

    b = RunBuilder()
    b.slo_search_probes()
    run = b.write(tmp_path / "run", bill=False)
    slo = {"ttft_p99_s": "0.5", "tpot_p99_s": 0.1}  # as a candidates file may spell it
    assert step_reader(run, "fixed", None, ladder=False) is None
    search = step_reader(run, "slo_search", slo, ladder=False)
    assert search("rate=2") == (True, True) and search("rate=4") == (True, False)
    assert search("rate=9") == (False, False)  # not run yet: no row
    valid, tok_s = step_reader(run, "slo_search", slo, ladder=True)("rate=2")
    assert valid is True and tok_s > 0
