"""One ranking of candidates on cost (resources/analysis/ranking.py), the same in the
comparison report, the demo's terminal headline and the store: hand-made standings, then
the store over a real DuckDB file and real run folders."""

from __future__ import annotations

import json
import math

import pyarrow as pa
from servingbench.resources.analysis.ranking import Standing, rank
from servingbench.resources.storage.store import Storage

SLO = (2.0, 0.1)


def head(meets, cost, **kw) -> dict:
    return {"meets_slo": meets, "cost_per_1m_output_usd": cost, "slo_ttft_s": SLO[0],
            "slo_tpot_s": SLO[1], **kw}


def test_measured_cheapest_first_parity_and_emulated_never_ranked():
    standings = [
        Standing("no-headline", None, emulated=False),
        Standing("not-measured", head(None, None), emulated=False),
        Standing("meets-none", head(False, None), emulated=False),
        Standing("dear", head(True, 3.0), emulated=False),
        Standing("emulated-cheapest", head(True, 0.5), emulated=True),
        Standing("trails-quality", head(True, 0.1), emulated=False, failed_parity=True),
        Standing("cheap", head(True, 1.0), emulated=False),
        Standing("no-cost", head(True, math.nan), emulated=False),  # NaN as pandas reads a null
    ]
    got = [(s.candidate, place) for s, place in rank(standings)]
    assert got == [("cheap", 1), ("dear", 2), ("no-cost", None), ("emulated-cheapest", None),
                   ("meets-none", None), ("trails-quality", None), ("not-measured", None),
                   ("no-headline", None)]


# candidate, cost per 1M output tokens, failed quality parity: two ties, a missing cost
TIED = [("a", 2.0, False), ("b", 1.0, False), ("c", 2.0, False), ("d", 1.0, False),
        ("e", 3.0, False), ("f", 0.5, True), ("g", None, False)]


def _sql_ranks(rows) -> dict:
    """frontier_levels' rank (sql/frontier_levels.sql) of the same candidates: one valid step
    each that reaches the one level within the TTFT SLO, at the candidate's cost."""
    from servingbench.resources.analysis.frontier import levels
    from servingbench.resources.contract.outputs import FRONTIER

    frontiers = [pa.Table.from_pylist([{
        "run_id": c, "candidate": c, "step": "c=1", "source": "measured", "valid": True,
        "accelerators": 8, "interactivity_tok_s": 10.0, "output_tok_s_per_accel": 10.0,
        "ttft_s_p99": 0.5, "tpot_s_p99": 0.1, "cost_per_1m_output_usd": cost,
        "on_frontier": True}], schema=FRONTIER) for c, cost, _ in rows]
    runs = [{"run_id": c, "candidate": c, "source": "measured", "rankable": not failed}
            for c, _, failed in rows]
    table = levels(frontiers, runs, slo_ttft_s=SLO[0], level_values=[5.0])
    return {r["candidate"]: r["rank"] for r in table.to_pylist()}


def test_ties_share_the_lower_rank_as_the_frontier_levels_query_ranks_them():
    got = {s.candidate: place for s, place in rank(
        Standing(c, head(True, cost), emulated=False, failed_parity=failed)
        for c, cost, failed in TIED)}
    assert got == {"b": 1, "d": 1, "a": 3, "c": 3, "e": 5, "f": None, "g": None}
    assert got == _sql_ranks(TIED)


def test_a_nan_meets_slo_is_not_measured_not_a_failure():
    (s, place), = rank([Standing("a", head(math.nan, None), emulated=False)])
    assert s.meets is None and place is None and s.key()[0] == 3


MANIFEST = {"instance_type": "p5.48xlarge", "source": "measured"}


def _publish(store: Storage, run_id: str, candidate: str, created: str, meets, cost,
             source: str = "measured") -> None:
    row = {"run_id": [run_id], "candidate": [candidate], "source": [source],
           "slo_ttft_s": [SLO[0]], "slo_tpot_s": [SLO[1]], "meets_slo": pa.array([meets], pa.bool_()),
           "cost_per_1m_output_usd": pa.array([cost], pa.float64())}
    store.publish(run_id, "p", MANIFEST | {"candidate": candidate, "source": source,
                                         "created_at": created}, {"headline": pa.table(row)})
    (store.runs_dir / run_id).mkdir(parents=True, exist_ok=True)


def test_the_store_ranks_the_latest_run_of_each_candidate_and_reads_parity(tmp_path):
    store = Storage(tmp_path)
    assert store.ranking(SLO) == []  # no store yet
    _publish(store, "a-old", "a", "2026-11-29T01:00:00.000000000Z", True, 0.5)
    _publish(store, "a-new", "a", "2026-11-29T02:00:00.000000000Z", True, 2.0)
    _publish(store, "b-1", "b", "2026-11-29T02:00:00.000000000Z", True, 1.0)
    _publish(store, "c-1", "c", "2026-11-29T02:00:00.000000000Z", True, 0.1)
    _publish(store, "e-1", "e", "2026-11-29T02:00:00.000000000Z", True, 0.01, source="emulated")
    (store.runs_dir / "c-1" / "quality_parity.json").write_text(json.dumps({"passed": False}))
    got = [(r["candidate"], r["run_id"], r["rank"], r["failed_parity"]) for r in store.ranking(SLO)]
    assert got == [("b", "b-1", 1, False), ("a", "a-new", 2, False), ("e", "e-1", None, False),
                   ("c", "c-1", None, True)]
    assert store.ranking((9.0, 9.0))[0]["rank"] is None  # no headline row at that SLO
