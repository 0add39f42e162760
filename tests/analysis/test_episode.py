"""contract §3.7 on one small episode worked out by hand: episode.parquet's every column (bucket
edges, a bucket with no request, the phase's end in the last bucket), scale_events.parquet
(a scale-up with its node, replica, phases and first token; a repeated decision that is no
row; a scale-down with no new node), episode.json (attainment, replica- and node-time, idle
replica-seconds with a request of unknown replica, cold start, cost over the whole phase).

Times are ms after T0. Steady phase [0, 35000], buckets of 10 s: [0,10) [10,20) [20,30) [30,35].
Nodes: n0 Ready before the run; n1 requested 5000, Ready 8000, gone 22000.
Replicas: r0 Ready before the run (on n0); r1 requested 5000 on n1, phases image_pull 1 s,
weights_load 2 s, compile 1 s, graph_capture 0.5 s, Ready 12000, stopped 21000.
Decisions: 5000 → 2 (up from initial 1), 9000 → 2 (no change: no row), 18000 → 1 (down).
Requests (sched = sent unless said; SLO 2 s TTFT, 0.1 s TPOT):
  A r0 sent 1000, tokens 1100 1150, fin 1200        ok, TTFT 0.1, TPOT 0.05  good
  B r0 sent 3000, tokens 5500 5600, fin 5700        ok, TTFT 2.5             missed
  C r0 sent 6000, fin 6500                           http_error               missed
  D r0 sched 9500 sent 9600, tokens 9700 10100 10150, fin 10200  TPOT 0.225   missed
  E r1 sent 12500, tokens 12700 12750, fin 12800    ok, TTFT 0.2             good
  F ?  sent 15000, tokens 15100 15150, fin 15200    ok (replica unknown)     good
  G r0 sent 16000 (resends C), token 16100, fin 16100  ok, one token        good
  H r0 sent 31000, tokens 31100 31200, fin 35000    ok, TPOT 0.1 (= SLO)     good
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from servingbench.pipelines.cli import main as cli
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.contract import manifest as mf

from tests.support.runbuilder import HOUR_MS, T0, RunBuilder

S = "schedule"
RATE = 0.25


def episode(**fields) -> RunBuilder:
    b = RunBuilder(replicas={"min": 1, "max": 3, "initial": 1},
                   autoscaling={"policy": "local", "metric": "requests_waiting", "target": 4.0,
                                "activation_target": 0.0, "scale_up_cooldown_s": 0,
                                "scale_down_cooldown_s": 5},
                   scenario={"kind": "schedule", "input_tokens": 512, "output_tokens": 2,
                             "segments": [{"duration_s": 35, "rate": RATE}], "bucket_s": 10},
                   **fields)
    b.manifest["phases"]["steady"] = {"started_at": mf.format_ts(T0),
                                      "ended_at": mf.format_ts(T0 + 35_000 * 1_000_000)}
    b.request(S, phase="warmup", sent=-10000, chunks=[(-9900, 1)], finished=-9800, target=RATE)
    req = dict(target=RATE)
    b.request(S, sent=1000, chunks=[(1100, 1), (1150, 1)], finished=1200, replica="r0", **req)
    b.request(S, sent=3000, chunks=[(5500, 1), (5600, 1)], finished=5700, replica="r0", **req)
    c = b.request(S, sent=6000, finished=6500, status="http_error", http_status=503,
                  replica="r0", **req)
    b.request(S, sched=9500, sent=9600, chunks=[(9700, 1), (10100, 1), (10150, 1)],
              finished=10200, replica="r0", **req)
    b.request(S, sent=12500, chunks=[(12700, 1), (12750, 1)], finished=12800, replica="r1", **req)
    b.request(S, sent=15000, chunks=[(15100, 1), (15150, 1)], finished=15200, **req)
    b.request(S, sent=16000, chunks=[(16100, 1)], finished=16100, replica="r0", retry_of=c, **req)
    b.request(S, sent=31000, chunks=[(31100, 1), (31200, 1)], finished=35000, replica="r0", **req)
    b.event("node_ready", "n0", -60000)
    b.replica_up("r0", -50000, -40000, node="n0")
    b.event("scale_decision", "local", 5000, value=2.0, detail="requests_waiting=9")
    b.event("node_requested", "n1", 5000)
    b.replica_up("r1", 5000, 12000, node="n1", phases={
        "image_pull": 1.0, "weights_load": 2.0, "compile": 1.0, "graph_capture": 0.5})
    b.event("node_ready", "n1", 8000)
    b.event("scale_decision", "local", 9000, value=2.0, detail="requests_waiting=5")
    b.event("scale_decision", "local", 18000, value=1.0, detail="requests_waiting=0")
    b.event("replica_stopped", "r1", 21000)
    b.event("node_gone", "n1", 22000)
    # n0 the whole hour, n1 billed from its request (5 s) to gone (22 s): 17 s
    usage = 1.0 + 17 / 3600
    b.bill_row(0, HOUR_MS, 55.04 * usage, usage)
    return b


def test_buckets_by_hand(tmp_path):
    result = analyze_run(episode().write(tmp_path / "run"))
    assert result.exit_code == 0, (result.message, result.gates)
    rows = pq.read_table(tmp_path / "run" / "episode.parquet").to_pylist()
    s = T0 // 1_000_000  # rows in ms after T0
    edges = [(int(r["bucket_start"].value // 1_000_000) - s, int(r["bucket_end"].value // 1_000_000) - s)
             for r in rows]
    assert edges == [(0, 10000), (10000, 20000), (20000, 30000), (30000, 35000)]
    want = [
        # offered (A B C D by scheduled_at; G resends: not offered), completed (ok by finished),
        # tokens (by chunk time), replicas, nodes (time-weighted), n sent, ttft p50, p99, attainment
        dict(offered_rps=0.4, completed_rps=0.2, output_tok_s=0.5, replicas_ready=1.0,
             nodes=1.2, n_requests=4, ttft_s_p50=0.1, ttft_s_p99=0.1 + 0.98 * 2.4,
             slo_attainment=0.25),
        dict(offered_rps=0.2, completed_rps=0.4, output_tok_s=0.7, replicas_ready=1.8,
             nodes=2.0, n_requests=3, ttft_s_p50=0.1, ttft_s_p99=0.1 + 0.98 * 0.1,
             slo_attainment=1.0),
        # no request at all: zero rates, null latency and attainment; r1 until 21 s, n1 until 22 s
        dict(offered_rps=0.0, completed_rps=0.0, output_tok_s=0.0, replicas_ready=1.1,
             nodes=1.2, n_requests=0, ttft_s_p50=None, ttft_s_p99=None, slo_attainment=None),
        # 5 s long; H finishes at the phase's end: in this last bucket
        dict(offered_rps=0.2, completed_rps=0.2, output_tok_s=0.4, replicas_ready=1.0,
             nodes=1.0, n_requests=1, ttft_s_p50=0.1, ttft_s_p99=0.1, slo_attainment=1.0),
    ]
    for got, exp in zip(rows, want, strict=True):
        assert got["run_id"] == "run-1"
        assert {k: got[k] for k in exp} == pytest.approx(exp, abs=1e-12)


def test_scale_events_by_hand(tmp_path):
    analyze_run(episode().write(tmp_path / "run"))
    up, down = pq.read_table(tmp_path / "run" / "scale_events.parquet").to_pylist()
    assert (up["decided_at"].value - T0, up["from_replicas"], up["to_replicas"],
            up["direction"]) == (5000 * 1_000_000, 1, 2, "up")
    assert (down["decided_at"].value - T0, down["from_replicas"], down["to_replicas"],
            down["direction"]) == (18000 * 1_000_000, 2, 1, "down")
    up = {k: v for k, v in up.items() if k.endswith("_s") or k.startswith("attainment")}
    down = {k: v for k, v in down.items() if k.endswith("_s") or k.startswith("attainment")}
    assert up == pytest.approx({**up, "node_ready_s": 3.0, "replica_ready_s": 7.0,
                                "first_token_s": 7.7, "image_pull_s": 1.0,
                                "weights_load_s": 2.0, "compile_s": 1.0, "graph_capture_s": 0.5,
                                # before [-55 s, 5 s): A B; during [5, 12): C D; after [12, 72)
                                "attainment_before": 0.5, "attainment_during": 0.0,
                                "attainment_after": 1.0}, abs=1e-12)
    # no new node or replica; down: no replica-ready or during; before [-42, 18): A..G (4 of 7)
    assert down == pytest.approx({**down, "node_ready_s": None, "replica_ready_s": None,
                                  "first_token_s": None, "image_pull_s": None,
                                  "weights_load_s": None, "compile_s": None,
                                  "graph_capture_s": None, "attainment_before": 4 / 7,
                                  "attainment_during": None, "attainment_after": 1.0})


def test_episode_json_by_hand(tmp_path):
    analyze_run(episode().write(tmp_path / "run"))
    doc = json.loads((tmp_path / "run" / "episode.json").read_text())
    assert doc.pop("bill_status") == "final"
    window_cost = 55.04 * 49 / 3600          # ∫ nodes = 35 s (n0) + 14 s (n1)
    assert doc == pytest.approx({
        "duration_s": 35.0, "requests": 8, "ok": 7, "slo_attainment": 5 / 8,
        "replica_seconds": 35 + 9,           # r0 the whole phase, r1 12 s → 21 s
        # r0 busy 0.2 + 2.7 + 0.5 + 0.6 + 0.1 + 4.0 s of 35; r1 busy 0.3 of 9; F on none
        "idle_replica_seconds": (35 - 8.1) + (9 - 0.3),
        "node_hours": 49 / 3600, "scale_ups": 1, "scale_downs": 1,
        "cold_start_s_max": 7.0,             # r1: requested 5 s, Ready 12 s
        "window_cost_usd": window_cost,
        "cost_per_1m_output_usd": window_cost / 14 * 1e6,   # ok tokens 2+2+3+2+2+1+2
        "idle_cost_usd": window_cost * 35.6 / 44}, rel=1e-9)


def test_the_schedule_step_has_the_timeline_s_replicas(tmp_path):
    result = analyze_run(episode().write(tmp_path / "run"))
    (row,) = result.metrics.to_pylist()
    assert (row["step"], row["load_mode"], row["target"]) == ("schedule", "rate", RATE)
    # window [1000, 35000]: r0 34 s + r1 9 s
    assert row["replicas_mean"] == pytest.approx(43 / 34)


def test_every_replica_unknown_leaves_idle_null_and_first_token_null(tmp_path):
    b = episode()
    for r in b.requests:
        r["replica"] = None
    analyze_run(b.write(tmp_path / "run"))
    doc = json.loads((tmp_path / "run" / "episode.json").read_text())
    assert doc["idle_replica_seconds"] is None and doc["idle_cost_usd"] is None
    up, _ = pq.read_table(tmp_path / "run" / "scale_events.parquet").to_pylist()
    assert up["first_token_s"] is None and up["replica_ready_s"] == 7.0


def test_a_rejected_episode_keeps_its_outputs_with_the_cost_null(tmp_path):
    b = episode()
    b.bill[0]["usage_quantity"] = 1.0 / 3600   # far below ∫ nodes: rule 5 fails
    result = analyze_run(b.write(tmp_path / "run"))
    assert result.exit_code == 3
    doc = json.loads((tmp_path / "run" / "episode.json").read_text())
    assert doc["requests"] == 8 and doc["replica_seconds"] == 44
    assert all(doc[k] is None for k in ("window_cost_usd", "cost_per_1m_output_usd",
                                        "idle_cost_usd", "bill_status"))
    assert len(pq.read_table(tmp_path / "run" / "episode.parquet")) == 4


def test_bucket_s_from_the_cli_overrides_the_scenario(tmp_path, capsys):
    run_dir = episode().write(tmp_path / "run")
    assert cli(["analyze", str(run_dir), "--bucket-s", "20"]) == 0
    rows = pq.read_table(run_dir / "episode.parquet").to_pylist()
    assert [(r["bucket_end"].value - r["bucket_start"].value) // 1_000_000 for r in rows] == [
        20000, 15000]
    assert rows[0]["offered_rps"] == pytest.approx(6 / 20)


def test_a_fixed_episode_without_events_counts_the_manifest(tmp_path):
    # replicas.max > 1 makes it an episode; no events: 2 replicas, 1 node throughout
    b = RunBuilder(replicas={"min": 2, "max": 2, "initial": 2})
    b.request("c=2", phase="warmup", sent=-500, chunks=[(-400, 1)], finished=-300)
    b.request("c=2", sent=0, chunks=[(100, 1), (150, 1)], finished=200, replica="a")
    b.request("c=2", sent=100, chunks=[(300, 1), (350, 1)], finished=400, replica="a")
    b.hourly_bill()
    result = analyze_run(b.write(tmp_path / "run"))
    assert result.exit_code == 0, result.gates
    doc = json.loads((tmp_path / "run" / "episode.json").read_text())
    # phase [0, 400]: 2 × 0.4 replica-s; "a" busy [0, 400] → 0, "b" (never named) idle 0.4
    assert doc["replica_seconds"] == pytest.approx(0.8)
    assert doc["idle_replica_seconds"] == pytest.approx(0.4)
    assert doc["node_hours"] == pytest.approx(0.4 / 3600)
    assert doc["scale_ups"] == doc["scale_downs"] == 0 and doc["cold_start_s_max"] is None
    (bucket,) = pq.read_table(tmp_path / "run" / "episode.parquet").to_pylist()
    assert (bucket["replicas_ready"], bucket["nodes"]) == (2.0, 1.0)
