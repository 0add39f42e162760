"""contract §3.9 on hand-computed runs with several models on one node: per step × model
metrics over the step's window, TTFT p99 during another model's swap and outside, the node's
step cost attributed by awake time (swapped) or memory share (resident), a model with no
request in the step, and swaps.parquet. Times are ms after T0.

Swapped: `big` loaded [0, 500), asleep [2800, 3000); `small` woken [3000, 3600), awake after;
`spare` never asked. Step rate=2, window [1000, 4500] = 3.5 s:
  big1   sent 1000, tokens 1100 1200, fin 1300   TTFT 0.1  outside
  big2   sent 2000, tokens 2100 2150, fin 2200   TTFT 0.1  outside
  big3   sent 3200, tokens 3700 3750, fin 3800   TTFT 0.5  during small's wake
  small1 sent 3100, tokens 3700 3800, fin 3900   TTFT 0.6  its own wake: not a swap for it
  small2 sent 4000, tokens 4100 4200, fin 4300   TTFT 0.1
  small3 sent 4400, fin 4500, http_error          (1 of 6 failed: the step is invalid)
Awake inside the window: big [1000, 2800) 1.8 s, small [3600, 4500] 0.9 s.
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from servingbench.resources.analysis.analyze import analyze_run

from tests.support.runbuilder import T0, RunBuilder


def model(name: str, placement: str, memory_share: float) -> dict:
    return {"name": name, "model": f"org/{name}", "model_revision": None, "precision": "bf16",
            "placement": placement, "memory_share": memory_share, "request_share": 0.5}


def two_models(placement: str) -> RunBuilder:
    b = RunBuilder(models=[model("big", placement, 0.6), model("small", placement, 0.3),
                           model("spare", placement, 0.1)])
    b.request("rate=2", phase="warmup", sent=-1000, chunks=[(-900, 1)], finished=-800, model="big")
    for sent, chunks, fin, name in [
            (1000, [(1100, 1), (1200, 1)], 1300, "big"), (2000, [(2100, 1), (2150, 1)], 2200, "big"),
            (3200, [(3700, 1), (3750, 1)], 3800, "big"), (3100, [(3700, 1), (3800, 1)], 3900, "small"),
            (4000, [(4100, 1), (4200, 1)], 4300, "small")]:
        b.request("rate=2", sent=sent, chunks=chunks, finished=fin, model=name)
    b.request("rate=2", sent=4400, finished=4500, status="http_error", http_status=503,
              model="small")
    if placement == "swapped":
        b.event("model_load", "big", 500, value=0.5)
        b.event("model_sleep", "big", 3000, value=0.2)
        b.event("model_wake", "small", 3600, value=0.6)
    b.hourly_bill()
    return b


def rows_by_model(tmp_path, placement: str) -> dict:
    result = analyze_run(two_models(placement).write(tmp_path / "run"))
    assert result.exit_code == 0, (result.message, result.gates)
    rows = pq.read_table(tmp_path / "run" / "derived_metrics_by_model.parquet").to_pylist()
    assert [(r["step"], r["model"]) for r in rows] == [
        ("rate=2", "big"), ("rate=2", "small"), ("rate=2", "spare")]
    return {r["model"]: r for r in rows}


WINDOW_COST = 55.04 * 3.5 / 3600


def test_swapped_models_by_hand(tmp_path):
    rows = rows_by_model(tmp_path, "swapped")
    big, small, spare = rows["big"], rows["small"], rows["spare"]
    # §3's columns over the model's requests, rates over the step's window
    assert (big["n_requests"], big["n_ok"], big["error_rate"], big["output_tokens"]) == (3, 3, 0.0, 6)
    assert big["window_s"] == 3.5 and big["output_tok_s"] == pytest.approx(6 / 3.5)
    assert big["achieved_concurrency"] == pytest.approx((0.3 + 0.2 + 0.6) / 3.5)
    assert (small["n_requests"], small["n_ok"]) == (3, 2)
    assert small["error_rate"] == pytest.approx(1 / 3)
    # the step's verdict (1 of 6 failed), though big alone failed nothing
    assert (big["valid"], big["invalid_reason"]) == (False, "error_rate")
    # during another model's load / wake, and outside
    assert big["ttft_s_p99_during_swap"] == pytest.approx(0.5)
    assert big["ttft_s_p99_outside_swap"] == pytest.approx(0.1)
    assert small["ttft_s_p99_during_swap"] is None          # its own wake is not a swap
    assert small["ttft_s_p99_outside_swap"] == pytest.approx(0.1 + 0.99 * 0.5)
    # attributed by awake time ÷ window: big 1.8 s, small 0.9 s of 3.5 s
    assert big["attributed_cost_per_1m_output_usd"] == pytest.approx(
        WINDOW_COST * (1.8 / 3.5) / 6 * 1e6, rel=1e-12)
    assert small["attributed_cost_per_1m_output_usd"] == pytest.approx(
        WINDOW_COST * (0.9 / 3.5) / 4 * 1e6, rel=1e-12)
    # a model with no request in the step: counts 0, rates and statistics null
    assert (spare["n_requests"], spare["n_ok"], spare["ttft_s_n"]) == (0, 0, 0)
    assert spare["error_rate"] is None and spare["output_tok_s"] is None
    assert spare["ttft_s_p99"] is None and spare["attributed_cost_per_1m_output_usd"] is None
    assert (spare["window_s"], spare["valid"]) == (3.5, False)


def test_resident_models_are_attributed_by_memory_share(tmp_path):
    rows = rows_by_model(tmp_path, "resident")
    assert rows["big"]["attributed_cost_per_1m_output_usd"] == pytest.approx(
        WINDOW_COST * 0.6 / 6 * 1e6, rel=1e-12)
    assert rows["small"]["attributed_cost_per_1m_output_usd"] == pytest.approx(
        WINDOW_COST * 0.3 / 4 * 1e6, rel=1e-12)
    # no swap events: every request is outside a swap
    assert rows["big"]["ttft_s_p99_during_swap"] is None
    assert not pq.read_table(tmp_path / "run" / "swaps.parquet").num_rows


def test_the_run_cost_counts_every_model_s_tokens(tmp_path):
    result = analyze_run(two_models("swapped").write(tmp_path / "run"))
    (row,) = result.cost.to_pylist()
    assert row["cost_per_1m_output_usd"] == pytest.approx(WINDOW_COST / 10 * 1e6, rel=1e-12)


def test_swaps_by_hand(tmp_path):
    analyze_run(two_models("swapped").write(tmp_path / "run"))
    rows = pq.read_table(tmp_path / "run" / "swaps.parquet").to_pylist()
    got = [(r["model"], r["kind"], (r["started_at"].value - T0) // 10**6,
            (r["ended_at"].value - T0) // 10**6, r["seconds"]) for r in rows]
    assert got == [("big", "model_load", 0, 500, 0.5), ("big", "model_sleep", 2800, 3000, 0.2),
                   ("small", "model_wake", 3000, 3600, 0.6)]


def test_without_a_bill_the_attributed_cost_is_null(tmp_path):
    run_dir = two_models("resident").write(tmp_path / "run", bill=False)
    assert analyze_run(run_dir).exit_code == 0
    rows = pq.read_table(run_dir / "derived_metrics_by_model.parquet").to_pylist()
    assert all(r["attributed_cost_per_1m_output_usd"] is None for r in rows)
