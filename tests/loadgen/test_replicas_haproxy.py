"""Several emulator replicas behind a real HAProxy on loopback: a replica joins and another
drains while requests stream, and every request is answered once, by the replica the
request log names (contract §2.2 `replica`), with every start, phase and stop an event
(§2.6)."""

from __future__ import annotations

import json
import threading
import time

import pyarrow.parquet as pq
import pytest
from servingbench.resources.contract.schemas import EVENTS
from servingbench.resources.loadgen import run_load
from servingbench.resources.model_server.fleet.balancer import Balancer, find_haproxy
from servingbench.resources.model_server.fleet.events import Events
from servingbench.resources.model_server.fleet.replicas import ReplicaSet

from tests.support.emulator import fixed_timing_args
from tests.support.loadgen import config, rows

pytestmark = pytest.mark.skipif(find_haproxy() is None,
                                reason="haproxy is not installed (make haproxy)")

COLD_S = 0.4  # each replica's start-up, split over its phases pro rata


def served(tmp_path) -> dict[str, set[str]]:
    """The request ids each replica's own ground truth says it answered."""
    return {f.stem.removeprefix("truth-"): {json.loads(line)["request_id"]
                                            for line in f.read_text().splitlines() if line}
            for f in tmp_path.glob("truth-*.jsonl")}


@pytest.mark.serial  # a join and a drain inside a 4 s stream
def test_a_replica_joins_and_another_drains_while_requests_stream(tmp_path):
    events = Events(tmp_path, "run-1")

    def args(name: str) -> list[str]:
        return [*fixed_timing_args(20, 5, tmp_path / f"truth-{name}.jsonl"),
                "--cold-start-s", str(COLD_S)]

    with Balancer() as lb:
        replicas = ReplicaSet(args, lb, events, drain_timeout_s=10)
        try:
            replicas.start(wait=True)  # r0
            cfg = config(lb.base_url, concurrency=[4], requests_per_step=None, duration_s=4.0,
                         output_tokens=16)
            load = threading.Thread(target=run_load, args=(cfg, tmp_path / "run"),
                                    kwargs={"progress": False})
            load.start()
            time.sleep(0.8)
            replicas.start(wait=True)  # r1 joins mid-stream
            time.sleep(0.8)
            drained_at = time.time_ns()
            replicas.stop("r0")  # r0 drains mid-stream
            load.join(60)
            assert not load.is_alive()
        finally:
            replicas.close()

    steady = rows(tmp_path / "run")
    ids = [r["request_id"] for r in steady]
    assert len(ids) == len(set(ids)) > 0
    assert {r["status"] for r in steady} == {"ok"}  # none lost to the join or the drain
    by_replica = {name: sum(r["replica"] == name for r in steady) for name in ("r0", "r1")}
    assert by_replica["r0"] > 0 and by_replica["r1"] > 0
    assert sum(by_replica.values()) == len(steady)  # every row names its replica
    # none counted twice: each logged request was answered by exactly one replica, the one
    # its row names (the load generator's probe before the step is not in the log)
    truth = served(tmp_path)
    for r in steady:
        assert [name for name, got in truth.items() if r["request_id"] in got] == [r["replica"]]
    # after the drain began, no new request went to r0
    assert not [r for r in steady if r["replica"] == "r0" and r["sent_at"].value > drained_at + 50e6]

    table = pq.read_table(tmp_path / "events.parquet")
    assert table.schema.names == EVENTS.names
    ev = table.to_pylist()
    assert {r["run_id"] for r in ev} == {"run-1"}
    kinds = [(r["kind"], r["subject"], r["detail"]) for r in ev if r["subject"] == "r1"]
    assert kinds == [("replica_requested", "r1", "localhost"),
                     ("replica_phase", "r1", "image_pull"), ("replica_phase", "r1", "weights_load"),
                     ("replica_phase", "r1", "graph_capture"), ("replica_phase", "r1", "ready"),
                     ("replica_ready", "r1", "localhost"), ("replica_stopped", "r1", "localhost")]
    phases = [r["value"] for r in ev if r["subject"] == "r1" and r["kind"] == "replica_phase"
              and r["detail"] != "ready"]
    assert sum(phases) == pytest.approx(COLD_S, abs=0.1)
    r0 = [r["kind"] for r in ev if r["subject"] == "r0"]
    assert r0[-1] == "replica_stopped" and "replica_ready" in r0
    assert json.dumps(ev, default=str)  # plain values only
