"""contract §3.6 by hand: dominance with ties, equal interactivity, a null TPOT and invalid
steps; the cost columns only from an accepted bill; the levels across runs (a candidate
reaching none, the SLO filter, ranks apart for measured and emulated)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.analysis.frontier import derive, levels, pareto
from servingbench.resources.contract.outputs import FRONTIER

from tests.support.runbuilder import clean_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

# step, valid, tpot_s_p50, output_tok_s (8 accelerators: per accelerator is / 8)
STEPS = [
    ("A", True, 0.010, 800.0),    # interactivity 100, 100 per accel: on (nothing beats both)
    ("B", True, 0.020, 1600.0),   # 50, 200: on
    ("C", True, 0.020, 1600.0),   # the same point as B: a tie, both on
    ("D", True, 0.020, 800.0),    # equal interactivity to B, less throughput: dominated
    ("E", True, 0.040, 1600.0),   # equal throughput to B, less interactivity: dominated
    ("F", False, 0.005, 3200.0),  # invalid: never on, and dominates nobody (A stays on)
    ("G", True, None, 4000.0),    # no TPOT (single-token outputs): interactivity null, not on
    ("H", True, 0.050, 2400.0),   # 20, 300: on
]


def _metrics(steps=STEPS) -> pa.Table:
    n = len(steps)
    return pa.table({
        "run_id": ["r"] * n, "step": [s[0] for s in steps], "source": ["measured"] * n,
        "valid": [s[1] for s in steps], "tpot_s_p50": [s[2] for s in steps],
        "output_tok_s": [s[3] for s in steps], "load_mode": ["concurrency"] * n,
        "target": [float(i) for i in range(n)], "window_s": [10.0] * n,
        "input_tokens": pa.array([1000] * (n - 1) + [None], pa.int64()),
        "output_tokens": pa.array([int(s[3] * 10) for s in steps], pa.int64()),
        "ttft_s_p99": [0.5] * n, "tpot_s_p99": [0.1] * n})


def _frontier(metrics: pa.Table, cost: pa.Table | None = None, accelerators=8) -> dict:
    # frontier.sql's points, then pareto.sql's rule (the two named queries derive runs)
    manifest = {"candidate": "cand", "node_count": 1 if accelerators else None,
                "accelerators_per_node": accelerators, "instance_type": "unknown.type"}
    rows = derive(manifest, metrics, cost).to_pylist()
    return {r["step"]: r for r in rows}


def test_dominance_ties_equal_interactivity_null_tpot_and_invalid_steps():
    rows = _frontier(_metrics())
    assert {s for s, r in rows.items() if r["on_frontier"]} == {"A", "B", "C", "H"}
    assert rows["A"]["interactivity_tok_s"] == pytest.approx(100.0)
    assert rows["A"]["output_tok_s_per_accel"] == pytest.approx(100.0)
    assert rows["G"]["interactivity_tok_s"] is None and rows["G"]["on_frontier"] is False
    assert rows["F"]["valid"] is False and rows["F"]["on_frontier"] is False
    # (input + output tokens) / window / accelerators: (1000 + 8000) / 10 / 8
    assert rows["A"]["total_tok_s_per_accel"] == pytest.approx(112.5)
    assert rows["H"]["total_tok_s_per_accel"] is None  # input tokens unknown
    # no accepted bill: the three cost columns are null
    assert all(r["cost_per_1m_output_usd"] is None and r["bill_status"] is None
               and r["cost_per_1m_total_usd"] is None for r in rows.values())


def test_pooled_runs_make_one_frontier_and_an_unranked_run_never_counts():
    # two runs' rows pooled (a sweep's members): one frontier over both, computed by the same
    # rule (pareto.sql); rows keep their order and their own columns
    one = derive({"candidate": "a", "node_count": 1, "accelerators_per_node": 8},
                 _metrics(STEPS[:3]), None)
    two = derive({"candidate": "b", "node_count": 1, "accelerators_per_node": 8},
                 _metrics([("Q", True, 0.008, 900.0), ("R", True, 0.020, 1500.0)]), None)
    pooled = pareto(pa.concat_tables([one, two]))
    assert pooled.column("step").to_pylist() == ["A", "B", "C", "Q", "R"]
    # Q (125, 112.5) beats A (100, 100); B and C (50, 200) still beat R (50, 187.5)
    assert pooled.column("on_frontier").to_pylist() == [False, True, True, True, False]
    # the second run failed quality parity: its steps never count, A is back on
    pooled = pareto(pa.concat_tables([one, two]), ranked=[True] * 3 + [False] * 2)
    assert pooled.column("on_frontier").to_pylist() == [True, True, True, False, False]


def test_unknown_accelerators_leave_throughput_null_and_nothing_on_the_frontier():
    rows = _frontier(_metrics(), accelerators=None)
    assert all(r["accelerators"] is None and r["output_tok_s_per_accel"] is None
               and r["on_frontier"] is False for r in rows.values())


def test_cost_per_1m_total_tokens_by_hand():
    cost = pa.table({"step": ["A", "H"], "window_cost_usd": [0.9, 0.6],
                     "cost_per_1m_output_usd": [112.5, 25.0], "bill_status": ["final"] * 2})
    rows = _frontier(_metrics(), cost)
    # 0.9 USD / (1000 + 8000) tokens × 1e6 = 100 USD per 1M total tokens
    assert rows["A"]["cost_per_1m_total_usd"] == pytest.approx(100.0)
    assert rows["A"]["cost_per_1m_output_usd"] == 112.5 and rows["A"]["bill_status"] == "final"
    assert rows["H"]["cost_per_1m_total_usd"] is None  # input null → null
    assert rows["B"]["cost_per_1m_output_usd"] is None  # no cost row behind B


def test_analyzed_run_frontier_by_hand(tmp_path):
    # clean_run: one step c=2, window 0.4 s, 9 output and 3 × 512 input tokens, TPOT p50
    # 40 ms (25, 40 and 46.7 ms), p5.48xlarge → 8 accelerators, 55.04 USD/h.
    result = analyze_run(clean_run().write(tmp_path / "run"))
    (row,) = pq.read_table(tmp_path / "run" / "frontier.parquet").to_pylist()
    assert pq.read_schema(tmp_path / "run" / "frontier.parquet").names == FRONTIER.names
    window_cost = 55.04 * 0.4 / 3600
    assert row == pytest.approx({
        "run_id": "run-1", "candidate": "p5-scout-bf16-tp8", "step": "c=2",
        "source": "emulated", "valid": True, "accelerators": 8,
        "interactivity_tok_s": 25.0, "output_tok_s_per_accel": 22.5 / 8,
        "total_tok_s_per_accel": (1536 + 9) / 0.4 / 8, "ttft_s_p99": row["ttft_s_p99"],
        "tpot_s_p99": row["tpot_s_p99"], "cost_per_1m_output_usd": window_cost / 9 * 1e6,
        "bill_status": "final", "cost_per_1m_total_usd": window_cost / 1545 * 1e6,
        "on_frontier": True,
        # all three within 2 s / 0.1 s; seconds per token 0.16/3, 0.39/2, 0.24/4: p90 at
        # position 1.8 of the sorted three, 0.06 + 0.8 × (0.195 − 0.06) = 0.168
        "slo_attainment": 1.0, "e2e_norm_interactivity_tok_s": 1 / 0.168})
    assert result.frontier.to_pylist() == [row]


def test_rejected_run_keeps_its_frontier_without_cost(tmp_path):
    b = clean_run()
    b.bill[0]["account_id"] = "999999999999"  # rule 5 (scoped) fails
    result = analyze_run(b.write(tmp_path / "run"))
    assert result.exit_code == 3
    (row,) = pq.read_table(tmp_path / "run" / "frontier.parquet").to_pylist()
    assert row["on_frontier"] is True and row["cost_per_1m_output_usd"] is None
    assert row["bill_status"] is None and row["cost_per_1m_total_usd"] is None


def test_an_unknown_instance_type_leaves_accelerators_null(tmp_path):
    b = clean_run()
    b.manifest["instance_type"] = "x9.unknown"
    for r in b.bill:
        r["instance_type"] = "x9.unknown"
    result = analyze_run(b.write(tmp_path / "run"))
    assert result.frontier.column("accelerators").to_pylist() == [None]
    assert result.frontier.column("on_frontier").to_pylist() == [False]


def test_an_old_run_folder_analyses_as_before(tmp_path):
    """The recorded fixture predates the frontier and the price bases: its outputs are
    unchanged, frontier.parquet is added and no what-if file appears."""
    run = shutil.copytree(FIXTURES / "good", tmp_path / "good")
    result = analyze_run(run)
    assert result.exit_code == 0
    assert (run / "frontier.parquet").exists() and not (run / "cost_what_if.parquet").exists()
    assert result.what_if is None
    assert sorted(p.name for p in run.iterdir()) == sorted([
        "bill.parquet", "chunk_log.parquet", "manifest.json", "steady_state_request_log.parquet",
        "warmup_log.parquet", "gates.json", "derived_metrics.parquet", "cost_per_1m.parquet",
        "headline.parquet", "derived_metrics_by_cache.parquet", "frontier.parquet"])


def test_accelerators_from_the_manifest_else_the_table_by_instance_type():
    from servingbench.resources.contract.accelerators import accelerators

    assert accelerators({"instance_type": "trn2.48xlarge", "node_count": 2}) == 32
    assert accelerators({"instance_type": "inf2.48xlarge", "node_count": 1}) == 12
    assert accelerators({"instance_type": "local.host", "node_count": 1}) == 1
    # the manifest's own count wins (a manifest that records it)
    assert accelerators({"instance_type": "p5.48xlarge", "node_count": 2,
                         "accelerators_per_node": 4}) == 8
    assert accelerators({"instance_type": "x9.unknown", "node_count": 1}) is None
    assert accelerators({"instance_type": "p5.48xlarge", "node_count": None}) is None


# --- levels across runs ----------------------------------------------------------------------
def _run_frontier(run_id, candidate, source, points) -> pa.Table:
    """points: (step, valid, interactivity, per accel, cost, ttft p99)."""
    return pa.Table.from_pylist([
        {"run_id": run_id, "candidate": candidate, "step": s, "source": source, "valid": v,
         "accelerators": 8, "interactivity_tok_s": i, "output_tok_s_per_accel": t,
         "total_tok_s_per_accel": None, "ttft_s_p99": ttft, "tpot_s_p99": 0.01,
         "cost_per_1m_output_usd": c, "bill_status": None if c is None else "final",
         "cost_per_1m_total_usd": None, "on_frontier": v} for s, v, i, t, c, ttft in points],
        schema=FRONTIER)


LEVEL_RUNS = {
    "x": ("X", "measured", [("x60", True, 60.0, 100.0, 5.0, 1.0),
                            ("x25", True, 25.0, 200.0, 2.5, 1.5),
                            ("x12", True, 12.0, 300.0, 1.8, 3.0),     # misses TTFT 2 s
                            ("x300", False, 300.0, 1000.0, 0.1, 0.1)]),  # invalid
    "y": ("Y", "measured", [("y15", True, 15.0, 250.0, 2.0, 0.5),
                            ("y8", True, 8.0, 400.0, 1.2, 0.5)]),
    "z": ("Z", "measured", [("z6", True, 6.0, 50.0, 9.0, 0.5)]),
    "w": ("W", "emulated", [("w-a", True, 30.0, 120.0, None, 0.5),
                            ("w-b", True, 30.0, 150.0, None, 0.5)]),
}


def _levels(rankable=lambda run_id: True) -> dict:
    frontiers = [_run_frontier(k, c, s, p) for k, (c, s, p) in LEVEL_RUNS.items()]
    runs = [{"run_id": k, "candidate": c, "source": s, "rankable": rankable(k)}
            for k, (c, s, _) in LEVEL_RUNS.items()]
    table = levels(frontiers, runs, slo_ttft_s=2.0, level_values=[5, 10, 20, 50, 100])
    return {(r["level_tok_s"], r["candidate"]): r for r in table.to_pylist()}


def test_levels_by_hand():
    got = _levels()
    assert len(got) == 5 * 4  # every candidate keeps a row at every level
    pick = {k: (r["step"], r["cost_per_1m_output_usd"], r["rank"]) for k, r in got.items()}
    assert pick[(5.0, "Y")] == ("y8", 1.2, 1)
    assert pick[(5.0, "X")] == ("x25", 2.5, 2)   # x12 is cheaper but misses the TTFT SLO
    assert pick[(5.0, "Z")] == ("z6", 9.0, 3)
    assert pick[(10.0, "Y")] == ("y15", 2.0, 1)
    assert pick[(10.0, "X")] == ("x25", 2.5, 2)
    assert pick[(10.0, "Z")] == (None, None, None)  # reaches no step: a row, never dropped
    assert got[(10.0, "Z")]["run_id"] == "z" and got[(10.0, "Z")]["source"] == "measured"
    assert pick[(20.0, "X")] == ("x25", 2.5, 1) and pick[(20.0, "Y")] == (None, None, None)
    assert pick[(50.0, "X")] == ("x60", 5.0, 1)
    # the invalid step at 300 tok/s never counts: nobody reaches 100
    assert all(got[(100.0, c)]["step"] is None for c in "XYZW")
    # no cost anywhere (emulated, no bill): the highest throughput per accelerator, unranked
    w = got[(20.0, "W")]
    assert (w["step"], w["output_tok_s_per_accel"], w["cost_per_1m_output_usd"], w["rank"]) == (
        "w-b", 150.0, None, None)
    assert w["source"] == "emulated"


def test_a_run_that_failed_parity_is_shown_never_ranked():
    got = _levels(rankable=lambda run_id: run_id != "y")
    assert (got[(5.0, "Y")]["step"], got[(5.0, "Y")]["rank"]) == ("y8", None)
    assert got[(5.0, "X")]["rank"] == 1 and got[(5.0, "Z")]["rank"] == 2


def test_cheapest_at_each_level_with_its_runner_up():
    from servingbench.resources.analysis.frontier import cheapest_by_level
    from servingbench.resources.analysis.summary import levels_text

    rows = {(r["level_tok_s"], r["source"]): r
            for r in cheapest_by_level(list(_levels().values()))}
    five = rows[(5.0, "measured")]
    assert (five["cheapest"], five["step"], five["cost_per_1m_output_usd"]) == ("Y", "y8", 1.2)
    assert (five["runner_up"], five["runner_up_cost_per_1m_output_usd"]) == ("X", 2.5)
    assert five["ratio"] == pytest.approx(2.5 / 1.2) and (five["reached"], five["of"]) == (3, 3)
    fifty = rows[(50.0, "measured")]
    assert (fifty["cheapest"], fifty["runner_up"], fifty["ratio"]) == ("X", None, None)
    # emulated W reaches 20 tok/s without a cost: counted as reaching, never ranked
    w = rows[(20.0, "emulated")]
    assert (w["reached"], w["of"], w["cheapest"]) == (1, 1, None)
    text = levels_text(list(_levels().values()))
    assert "2.08" in text and "3/3" in text


def test_the_manifest_accelerators_per_node_wins_in_the_analysis(tmp_path):
    b = clean_run()
    b.manifest["accelerators_per_node"] = 4  # e.g. half a node's GPUs given to the engine
    result = analyze_run(b.write(tmp_path / "run"))
    (row,) = result.frontier.to_pylist()
    assert row["accelerators"] == 4 and row["output_tok_s_per_accel"] == pytest.approx(22.5 / 4)
