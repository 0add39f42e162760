"""A spike schedule against emulator replicas whose start-up is known: the local autoscaler
decides to scale up during the burst, the new replicas go through their phases (summing to
the known cold start), join HAProxy, and serve requests the log attributes to them."""

from __future__ import annotations

import json
import threading

import pyarrow.parquet as pq
import pytest
from servingbench.resources.loadgen import run_load
from servingbench.resources.loadgen.scenarios.spec import from_mapping
from servingbench.resources.model_server.fleet.autoscale_loop import Autoscaler
from servingbench.resources.model_server.fleet.autoscale_rule import Policy
from servingbench.resources.model_server.fleet.balancer import Balancer, find_haproxy
from servingbench.resources.model_server.fleet.events import Events
from servingbench.resources.model_server.fleet.replicas import ReplicaSet

from tests.support.emulator import FIXED_MODEL, fixed_timing_args
from tests.support.loadgen import config, rows

pytestmark = pytest.mark.skipif(find_haproxy() is None,
                                reason="haproxy is not installed (make haproxy)")

COLD_S = 1.0  # every replica's start-up (--cold-start-s), split over its phases
# a new replica's process start on a busy 2-core machine comes on top of its phases
START_SLACK_S = 10.0


@pytest.mark.serial  # replicas start while a burst runs
def test_a_spike_scales_up_within_the_cold_start_of_the_new_replicas(tmp_path):
    events = Events(tmp_path, "run-spike")

    def args(name: str) -> list[str]:
        return [*fixed_timing_args(20, 5, tmp_path / f"truth-{name}.jsonl"),
                "--cold-start-s", str(COLD_S)]

    policy = Policy("rps", target=8.0, activation_target=0.0, scale_up_cooldown_s=0.0,
                    scale_down_cooldown_s=60.0, min_replicas=1, max_replicas=3)
    schedule, _ = from_mapping({"kind": "schedule", "segments": [
        {"duration_s": 1.0, "rate": 2}, {"duration_s": 7.0, "rate": 30},
        {"duration_s": 0.5, "rate": 0}]})
    with Balancer() as lb:
        replicas = ReplicaSet(args, lb, events)
        scaler = Autoscaler(policy, replicas, lb, events, initial=1, interval_s=0.25)
        try:
            replicas.start(wait=True)
            scaler.start()
            cfg = config(lb.base_url, concurrency=[], requests_per_step=None, scenario=schedule,
                         arrival="constant", output_tokens=8)
            load = threading.Thread(target=run_load, args=(cfg, tmp_path / "run"),
                                    kwargs={"progress": False})
            load.start()
            load.join(120)
            assert not load.is_alive()
        finally:
            scaler.stop()
            replicas.close()

    ev = pq.read_table(tmp_path / "events.parquet").to_pylist()
    decisions = [e for e in ev if e["kind"] == "scale_decision"]
    # the balancer's rate rises over its one-second window: one or more decisions up to 3
    # (ceil(1 × 30 / 8) = 4, at most 3), each above the one before
    values = [e["value"] for e in decisions]
    assert values == sorted(values) and values[-1] == 3.0 and values[0] >= 2.0
    assert all(e["subject"] == "local-autoscaler" and "rps=" in e["detail"] for e in decisions)
    # a decision's new replicas: requested at or after it, before the next one (§3.7)
    edges = [e["at"].value for e in decisions] + [float("inf")]
    owned = {}
    for e in ev:
        if e["kind"] == "replica_requested" and e["at"].value >= edges[0]:
            k = max(i for i in range(len(decisions)) if edges[i] <= e["at"].value)
            owned[e["subject"]] = edges[k]
    assert set(owned) == {"r1", "r2"}
    for name, d in owned.items():
        phases = [e for e in ev if e["subject"] == name and e["kind"] == "replica_phase"]
        assert [e["detail"] for e in phases] == ["image_pull", "weights_load", "graph_capture",
                                                 "ready"]
        assert sum(e["value"] for e in phases[:-1]) == pytest.approx(COLD_S, abs=0.15)
        ready = next(e["at"].value for e in ev if e["subject"] == name
                     and e["kind"] == "replica_ready")
        assert COLD_S <= (ready - d) / 1e9 <= COLD_S + START_SLACK_S
    steady = rows(tmp_path / "run")
    served = {r["replica"] for r in steady if r["status"] == "ok"}
    assert {"r0", "r1", "r2"} <= served  # the new replicas took requests once ready
    assert all(r["step"] == "schedule" for r in steady)


def test_a_fresh_balancer_reads_no_traffic():
    """Its start-up check goes through the runtime API: HAProxy would count a probe's empty
    connection to the frontend as a request per second for up to two seconds, which the
    `rps` autoscaler reads as traffic (and then never scales to zero on time)."""
    with Balancer() as lb:
        assert lb.totals() == {"rps": 0.0, "queued": 0.0}


def _ask(base_url: str, path: str, body: bytes | None = None) -> int:
    import http.client
    from urllib.parse import urlsplit

    u = urlsplit(base_url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        conn.request("POST" if body is not None else "GET", path, body=body,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


@pytest.mark.serial  # a replica starts and stops
def test_only_inference_requests_count_as_the_autoscalers_rps(tmp_path):
    """Health checks, tokenize calls (the warm-up's) and /metrics scrapes pass through the
    balancer too; counted as requests/s they would scale a pool out on traffic that is not
    load. The rate the `rps` policy reads counts completions and chat completions only."""
    with Balancer() as lb:
        replicas = ReplicaSet(lambda name: fixed_timing_args(2, 1), lb, Events(tmp_path, "run-rps"))
        try:
            replicas.start(wait=True)
            for _ in range(5):
                _ask(lb.base_url, "/health")
                _ask(lb.base_url, "/metrics")
                _ask(lb.base_url, "/tokenize", b'{"prompt": "hello"}')
            assert lb.totals()["rps"] == 0.0
            body = json.dumps({"model": FIXED_MODEL, "max_tokens": 1, "prompt": "hi"}).encode()
            assert _ask(lb.base_url, "/v1/completions", body) == 200
            assert lb.totals()["rps"] > 0
        finally:
            replicas.close()


@pytest.mark.serial  # a replica starts and stops
def test_scale_to_zero_waits_the_cooldown_from_the_start_then_drains(tmp_path):
    events = Events(tmp_path, "run-zero")
    policy = Policy("rps", target=4.0, activation_target=0.5, scale_down_cooldown_s=8.0,
                    min_replicas=0, max_replicas=2)
    with Balancer() as lb:
        replicas = ReplicaSet(lambda name: fixed_timing_args(20, 5), lb, events)
        scaler = Autoscaler(policy, replicas, lb, events, initial=1)
        try:
            replicas.start(wait=True)
            # no request yet: KEDA's cooldown runs from the start, so the replica stays
            assert scaler.tick(now=1.0) == 1 and replicas.count() == 1
            assert scaler.tick(now=8.5) == 0  # idle for the whole cooldown: to zero
            assert replicas.count() == 0
        finally:
            replicas.close()
    ev = pq.read_table(tmp_path / "events.parquet").to_pylist()
    assert [(e["kind"], e["value"]) for e in ev if e["kind"] == "scale_decision"] == [
        ("scale_decision", 0.0)]
    assert [e["kind"] for e in ev][-1] == "replica_stopped"
