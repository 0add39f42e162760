"""A spot run on the embedded default, end to end with real parts: two emulator replicas
(each its own emulated node) behind a real HAProxy, interrupted at two known times into the
steady phase. Each notice drains the oldest serving replica and starts its replacement; the
notice later the replica's process is killed mid-stream. The load generator records the
requests it cut as `disconnect` / `spot_interruption` and sends each again (`retry_of`),
the price sheet bills the node timeline at the spot price, and the analyzer's
interruptions.parquet is checked against the same figures worked out here, by hand, from
the request log and the events."""

from __future__ import annotations

import threading
import time

import pyarrow.parquet as pq
import pytest
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.billing.price_sheet import PriceSheetBill
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.deployment import Replicated
from servingbench.resources.contract.schemas import write_parquet
from servingbench.resources.loadgen import run_load
from servingbench.resources.loadgen.interrupted import CUT
from servingbench.resources.loadgen.scenarios.spec import from_mapping
from servingbench.resources.model_server.fleet.balancer import find_haproxy
from servingbench.resources.model_server.fleet.replicated import replicated

from tests.support.emulator import fixed_timing_args
from tests.support.loadgen import config, rows

pytestmark = pytest.mark.skipif(find_haproxy() is None,
                                reason="haproxy is not installed (make haproxy)")

RUN = "spot-local-1"
AT = [2.0, 7.0]        # seconds into the steady phase (the first replacement settled in)
NOTICE_S = 1.0         # each notice, before the node is gone
COLD_S = 2.5           # a replica's start-up: well past the notice
ITL_MS, TOKENS = 50, 80  # a request streams for ~4 s: longer than the notice, so some are cut
RATE, LENGTH_S = 6, 10
SPOT_USD = 24.8


def _manifest() -> dict:
    m = mf.empty(RUN, "emulated", time.time_ns())
    m.update(candidate="spot-pair", instance_type="p5.48xlarge", node_count=1,
             account_id="local", region="us-east-1", model="test",
             capacity="spot", replicas={"min": 2, "max": 2, "initial": 2},
             price_basis={"region": "us-east-1", "purchase_option": "spot",
                          "retrieved_on": "unverified", "source": "price_sheet",
                          "hourly_usd_per_node": SPOT_USD})
    return m


# not `serial`: every figure it checks is read from the run's own log and events (nothing
# compares a duration with a bound that another test's load could move), and the margins
# it relies on (a 2.5 s start-up against a 1 s notice, ~4 s streams at 6 req/s) only grow
# on a busy machine; the one that shrinks there (a replacement ready before the next
# notice) is checked from the events instead of assumed
@pytest.mark.slow
def test_two_interruptions_on_the_embedded_default(tmp_path):
    run_dir = tmp_path / RUN
    run_dir.mkdir()
    mf.dump(_manifest(), run_dir / "manifest.json")

    def args(name: str) -> list[str]:
        return [*fixed_timing_args(20, ITL_MS, run_dir / f"emulator_ground_truth.{name}.jsonl"),
                "--cold-start-s", str(COLD_S)]

    schedule, _ = from_mapping({"kind": "schedule",
                                "segments": [{"duration_s": LENGTH_S, "rate": RATE}]})
    plan = Replicated.of({"min": 2, "max": 2, "initial": 2},
                         interruptions={"at": AT, "notice_s": NOTICE_S})
    with replicated(args, run_dir, RUN, plan, 60) as pool:
        cfg = config(pool["endpoint"], concurrency=[], requests_per_step=None, scenario=schedule,
                     arrival="constant", output_tokens=TOKENS, warmup_requests=2,
                     retry_interrupted=True, run_id=RUN)
        load = threading.Thread(target=run_load, args=(cfg, run_dir), kwargs={"progress": False})
        load.start()
        load.join(120)
        assert not load.is_alive()

    manifest = mf.load(run_dir / "manifest.json")
    write_parquet(PriceSheetBill().fetch_bill(manifest, run_dir), run_dir / "bill.parquet")
    result = analyze_run(run_dir)
    assert result.exit_code == 0, (result.message, result.gates)

    ev = pq.read_table(run_dir / "events.parquet").to_pylist()
    t = {}  # (kind, subject) -> first time
    for e in sorted(ev, key=lambda e: e["at"].value):
        t.setdefault((e["kind"], e["subject"]), e["at"].value)
    kinds = [(e["kind"], e["subject"]) for e in ev if e["kind"].startswith("interruption")]
    # the oldest serving replica each time: r0, then r1; their replacements r2 and r3
    assert kinds == [("interruption_notice", "node-r0"), ("interruption", "node-r0"),
                     ("interruption_notice", "node-r1"), ("interruption", "node-r1")]
    node_of = {e["subject"]: e["detail"] for e in ev if e["kind"] == "replica_requested"}
    assert node_of == {f"r{i}": f"node-r{i}" for i in range(4)}
    for node in ("node-r2", "node-r3"):  # the replacements: asked for at the notices
        assert {("node_requested", node), ("node_ready", node), ("node_gone", node)} <= set(t)
    steady0 = mf.parse_ts(manifest["phases"]["steady"]["started_at"])
    for at, old, new in ((AT[0], "r0", "r2"), (AT[1], "r1", "r3")):
        notice = t[("interruption_notice", f"node-{old}")]
        assert notice >= steady0 + at * 1e9
        assert t[("replica_requested", new)] >= notice
        assert t[("interruption", f"node-{old}")] - notice >= NOTICE_S * 1e9
        assert ("replica_stopped", old) in t
        phases = [e["detail"] for e in ev if e["kind"] == "replica_phase" and e["subject"] == new]
        assert phases == ["image_pull", "weights_load", "graph_capture", "ready"]

    log = rows(run_dir)
    ids = [r["request_id"] for r in log]
    assert len(ids) == len(set(ids))
    # every request sent is in the log with a status: the schedule's arrivals and one
    # resend per cut request
    cut = [r for r in log if r["error"] == CUT]
    resends = [r for r in log if r["retry_of"] is not None]
    assert len(log) == RATE * LENGTH_S + len(resends)
    assert all(r["status"] == "disconnect" and r["replica"] in ("r0", "r1") for r in cut)
    assert sorted(r["retry_of"] for r in resends) == sorted(r["request_id"] for r in cut)
    # no request lost silently: every other failure is the balancer's 503 for a request sent
    # while no replica served (both first replicas noticed before a replacement was ready:
    # a replacement's start-up is slower on a busy machine than the 5 s between notices)
    serving = [(t[("replica_ready", r)], t.get(("interruption_notice", node), float("inf")))
               for r, node in node_of.items() if ("replica_ready", r) in t]
    slack = 0.5e9  # the balancer learns of a ready or a drained replica just after the event
    for r in log:
        if r["error"] == CUT or r["status"] == "ok":
            continue
        assert r["status"] == "http_error" and r["http_status"] == 503, r
        sent = r["sent_at"].value
        assert not any(start + slack <= sent < end - slack for start, end in serving), r
    by_id = {r["request_id"]: r for r in log}

    got = pq.read_table(run_dir / "interruptions.parquet").to_pylist()
    assert [g["node"] for g in got] == ["node-r0", "node-r1"]
    for g, old in zip(got, ("r0", "r1"), strict=True):
        notice = t[("interruption_notice", f"node-{old}")]
        gone = t[("interruption", f"node-{old}")]
        mine = [r for r in log if r["replica"] == old]
        in_flight = [r for r in mine if r["sent_at"].value <= notice < r["finished_at"].value]
        lost = [r for r in mine if r["status"] != "ok"
                and notice <= r["finished_at"].value <= gone + 30e9]
        retried = [r for r in lost if any(x["retry_of"] == r["request_id"] and x["status"] == "ok"
                                          for x in log)]
        last = max(r["finished_at"].value for r in mine if r["finished_at"].value >= notice)
        new = "r2" if old == "r0" else "r3"
        assert g["interrupted_at"].value == gone
        assert g["in_flight_at_notice"] == len(in_flight) > 0
        # what was in flight at the notice and outlived the notice is lost, no more
        assert {r["request_id"] for r in lost} == {r["request_id"] for r in cut
                                                    if r["replica"] == old}
        assert g["lost"] == len(lost) > 0
        assert g["retried_ok"] == len(retried) == len(lost)
        assert g["drain_s"] == pytest.approx((last - notice) / 1e9, abs=1e-9)
        assert g["drain_s"] >= NOTICE_S  # the cut ones end when the node is gone
        # the replacement's start-up outlasts the notice: it is ready after the node is gone
        assert g["replacement_ready_s"] == pytest.approx(
            (t[("replica_ready", new)] - gone) / 1e9, abs=1e-9)
        assert g["replacement_ready_s"] > 0
        for r in lost:  # nothing sent to a drained replica after its notice
            assert by_id[r["request_id"]]["sent_at"].value <= notice

    # the bill: the spot price over the node timeline (four nodes, each from its request to
    # its interruption or end), as SpotUsage
    (bill,) = pq.read_table(run_dir / "bill.parquet").to_pylist()
    assert bill["usage_type"] == "SpotUsage:p5.48xlarge"
    assert bill["amount"] == pytest.approx(SPOT_USD * bill["usage_quantity"])
    steady1 = mf.parse_ts(manifest["phases"]["steady"]["ended_at"])
    hours = sum(min(t.get(("interruption", n), t.get(("node_gone", n))), steady1)
                - max(t[("node_requested", n)], steady0)
                for n in (f"node-r{i}" for i in range(4))) / 3.6e12
    assert bill["usage_quantity"] == pytest.approx(hours, rel=1e-9)
