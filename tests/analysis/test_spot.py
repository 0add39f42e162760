"""contract §3.8: interruptions.parquet of a spot run with two interruption notices at known
times (hand-checked in_flight_at_notice, lost, retried_ok through retry_of chains, drain_s,
replacement_ready_s), the same without the replica column, and spot_pairs beside the
comparison with the effective-discount arithmetic. Times are ms after T0.

Nodes n0, n1 Ready before the run, r0 on n0, r1 on n1. Notice for n1 at 10000, n1 interrupted
at 14000; its replacement n2 requested at 10000, Ready 13000, replica r2 on n2 requested
10000, Ready 20000. Notice for n0 at 30000, never interrupted (it survived).
  S r1 sent 5000  fin 7000   ok                      (before the notice)
  P r1 sent 8000  fin 12000  ok                      in flight at notice 1, drains
  Q r1 sent 9000  fin 14000  disconnect spot_interruption   in flight, lost
  R r1 sent 9500  fin 14000  disconnect spot_interruption   in flight, lost
  T r0 sent 9800  fin 11000  ok                      (another node)
  Q2 r0 sent 14100 fin 14500 ok, resends Q           → Q retried ok
  R2 r0 sent 14100 fin 14300 disconnect (reset), resends R
  R3 r0 sent 15000 fin 15400 ok, resends R2          → R retried ok through the chain
  U r0 sent 29000 fin 31000 ok                       in flight at notice 2, drains 1 s
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.analysis.spot import pairs_of_folders
from servingbench.resources.contract import manifest as mf
from servingbench.resources.report.comparison import write_comparison_report

from tests.support.runbuilder import HOUR_MS, T0, RunBuilder, clean_run

CUT = "spot_interruption"


def spot_run(replicas_known: bool = True) -> RunBuilder:
    b = RunBuilder(capacity="spot")
    b.request("c=2", phase="warmup", sent=-3000, chunks=[(-2900, 1)], finished=-2800)

    def req(replica, sent, fin, ok=True, **kw):
        chunks = [(sent + 100, 1), (fin, 1)] if ok else []
        return b.request("c=2", sent=sent, chunks=chunks, finished=fin,
                         status="ok" if ok else "disconnect", http_status=200 if ok else None,
                         replica=replica if replicas_known else None, **kw)
    req("r1", 5000, 7000)
    req("r1", 8000, 12000)
    q = req("r1", 9000, 14000, ok=False, error=CUT)
    r = req("r1", 9500, 14000, ok=False, error=CUT)
    req("r0", 9800, 11000)
    req("r0", 14100, 14500, retry_of=q)
    r2 = req("r0", 14100, 14300, ok=False, error="connection reset", retry_of=r)
    req("r0", 15000, 15400, retry_of=r2)
    req("r0", 29000, 31000)
    for node, replica in (("n0", "r0"), ("n1", "r1")):
        b.event("node_ready", node, -60000)
        b.replica_up(replica, -50000, -40000, node=node)
    b.event("interruption_notice", "n1", 10000)
    b.event("node_requested", "n2", 10000)
    b.replica_up("r2", 10000, 20000, node="n2")
    b.event("node_ready", "n2", 13000)
    b.event("interruption", "n1", 14000)
    b.event("interruption_notice", "n0", 30000)
    # n0 the hour, n1 to 14 s, n2 billed from its request at 10 s
    usage = 1 + 14 / 3600 + (3600 - 10) / 3600
    b.bill_row(0, HOUR_MS, 20.0 * usage, usage, usage_type="USE1-SpotUsage:p5.48xlarge")
    return b


def test_interruptions_by_hand(tmp_path):
    result = analyze_run(spot_run().write(tmp_path / "run"))
    assert result.exit_code == 0, (result.message, result.gates)
    first, second = pq.read_table(tmp_path / "run" / "interruptions.parquet").to_pylist()
    assert (first["node"], first["notice_at"].value - T0, first["interrupted_at"].value - T0) == (
        "n1", 10000 * 10**6, 14000 * 10**6)
    assert {k: first[k] for k in ("in_flight_at_notice", "lost", "retried_ok")} == {
        "in_flight_at_notice": 3, "lost": 2, "retried_ok": 2}
    assert first["drain_s"] == pytest.approx(4.0)             # Q and R end at 14 s
    assert first["replacement_ready_s"] == pytest.approx(6.0)  # r2 Ready 20 s, cut at 14 s
    assert (second["node"], second["interrupted_at"]) == ("n0", None)
    assert {k: second[k] for k in ("in_flight_at_notice", "lost", "retried_ok")} == {
        "in_flight_at_notice": 1, "lost": 0, "retried_ok": 0}
    assert second["drain_s"] == pytest.approx(1.0)            # U ends at 31 s
    assert second["replacement_ready_s"] is None              # no interruption


def test_without_the_replica_column_every_request_counts_and_drain_is_unknown(tmp_path):
    analyze_run(spot_run(replicas_known=False).write(tmp_path / "run"))
    first, second = pq.read_table(tmp_path / "run" / "interruptions.parquet").to_pylist()
    # at 10 s in flight: P, Q, R, T; lost: the spot_interruption ones (R2's reset is not)
    assert (first["in_flight_at_notice"], first["lost"], first["retried_ok"]) == (4, 2, 2)
    assert first["drain_s"] is None
    assert (second["in_flight_at_notice"], second["lost"]) == (1, 0)


def test_an_on_demand_run_has_no_interruptions_file(tmp_path):
    run_dir = clean_run().write(tmp_path / "run")
    analyze_run(run_dir)
    assert not (run_dir / "interruptions.parquet").exists()


BASES = [{"basis": "on_demand", "hourly_usd_per_node": 55.04, "price_source": "price_list",
          "retrieved_on": "2026-11-28", "region": "us-east-1"},
         {"basis": "spot", "hourly_usd_per_node": 24.8, "price_source": "spot_price_history",
          "retrieved_on": "2026-11-28", "region": "us-east-1"}]


def pair_run(run_id: str, created: str, spot: bool, rate: float, **fields) -> RunBuilder:
    """clean_run's requests (9 tokens, window [1000, 1400] ms) billed at `rate` USD/h."""
    b = RunBuilder(run_id, candidate="cand", created_ns=mf.parse_ts(created),
                   price_bases=BASES, **({"capacity": "spot"} if spot else {}), **fields)
    b.requests, b.chunks = clean_run().requests, clean_run().chunks
    for row in b.requests + b.chunks:
        row["run_id"] = run_id
    b.bill_row(0, HOUR_MS, rate, 1.0,
               usage_type=f"USE1-{'SpotUsage' if spot else 'BoxUsage'}:p5.48xlarge")
    return b


def test_spot_pairs_the_latest_accepted_runs_with_the_effective_discount(tmp_path):
    dirs = [pair_run("od-0", "2026-11-27T00:00:00Z", False, 99.0).write(tmp_path / "od-0"),
            pair_run("od-1", "2026-11-28T00:00:00Z", False, 55.04).write(tmp_path / "od-1")]
    # the spot run is an episode (two replicas): its cost is over the whole steady phase
    # [0, 2000] ms, not its step's window; one notice after every request: nothing lost
    spot = pair_run("spot-1", "2026-11-28T01:00:00Z", True, 20.0,
                    replicas={"min": 2, "max": 2, "initial": 2})
    spot.manifest["phases"]["steady"] = {"started_at": mf.format_ts(T0),
                                         "ended_at": mf.format_ts(T0 + 2000 * 10**6)}
    spot.event("interruption_notice", "n0", 1900)
    dirs.append(spot.write(tmp_path / "spot-1"))
    late = pair_run("spot-2", "2026-11-29T00:00:00Z", True, 1.0)
    late.bill[0]["account_id"] = "999999999999"  # rejected by rule 5: never paired
    dirs.append(late.write(tmp_path / "spot-2"))
    other = pair_run("solo", "2026-11-28T00:00:00Z", False, 55.04)
    other.manifest["candidate"] = "no-spot-run"
    dirs.append(other.write(tmp_path / "solo"))
    for d in dirs:
        analyze_run(d)
    (row,) = pairs_of_folders(dirs).to_pylist()
    od_cost = 55.04 * 0.4 / 3600 / 9 * 1e6          # headline step c=2
    spot_cost = 20.0 * 2.0 / 3600 / 9 * 1e6         # episode.json: the whole 2 s phase
    names = ("candidate", "on_demand_run_id", "spot_run_id", "source")
    assert tuple(row[k] for k in names) == ("cand", "od-1", "spot-1", "emulated")
    assert {k: v for k, v in row.items() if k not in names} == pytest.approx({
        "on_demand_cost_per_1m_output_usd": od_cost, "spot_cost_per_1m_output_usd": spot_cost,
        "effective_discount": 1 - spot_cost / od_cost,     # 1 − (20 × 2) / (55.04 × 0.4)
        "what_if_spot_discount": 1 - 24.8 / 55.04,
        "interruptions": 1, "lost": 0}, rel=1e-12)
    assert row["effective_discount"] == pytest.approx(1 - 40 / 22.016)  # dearer: negative

    # the comparison writes the same rows beside comparison.html
    out = write_comparison_report(dirs, tmp_path / "cmp" / "comparison.html")
    assert pq.read_table(out.parent / "spot_pairs.parquet").to_pylist() == [row]
