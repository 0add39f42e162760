"""A replica's drain that outlasts HAProxy (the run's balancer stopped while a scale-down
waits for the replica's requests in flight) still ends with the replica stopped and its
`replica_stopped` and `node_gone` written: the drain's thread used to die on the balancer's
closed socket, leaving the replica's process running and its stop unrecorded. Real emulator
replicas behind real HAProxy."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from servingbench.resources.model_server.fleet.balancer import Balancer, find_haproxy
from servingbench.resources.model_server.fleet.events import Events
from servingbench.resources.model_server.fleet.replicas import ReplicaSet

from tests.support.emulator import FIXED_MODEL, fixed_timing_args

pytestmark = pytest.mark.skipif(find_haproxy() is None,
                                reason="haproxy is not installed (make haproxy)")


def _stream(base_url: str) -> None:
    try:  # 400 tokens, 50 ms apart: in flight for the whole test; cut when HAProxy stops
        with httpx.stream("POST", f"{base_url}/v1/completions", timeout=60, trust_env=False,
                          json={"model": FIXED_MODEL, "prompt": "hi", "max_tokens": 400,
                                "stream": True}) as r:
            for _ in r.iter_bytes():
                pass
    except httpx.HTTPError:
        pass


@pytest.mark.timeout(120)
def test_a_drain_that_outlasts_haproxy_still_stops_and_records_the_replica(tmp_path):
    events = Events(tmp_path, "run-d")
    lb = Balancer()
    lb.start()
    replicas = ReplicaSet(lambda name: fixed_timing_args(20, 50), lb, events,
                          drain_timeout_s=30.0, node="own")
    try:
        replicas.start(wait=True)
        (rep,) = replicas.ready
        client = threading.Thread(target=_stream, args=(lb.base_url,), daemon=True)
        client.start()
        deadline = time.monotonic() + 20
        while lb.active(rep.name) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lb.active(rep.name) == 1
        drain = replicas.stop_later(rep.name)  # waits for the request in flight...
        time.sleep(0.3)
        lb.stop()  # ...and the run's end stops HAProxy under it
        drain.join(40)
        assert not drain.is_alive()
        assert rep.proc.proc.poll() is not None, "the replica outlived its drain"
        assert rep.state == "stopped" and rep.error.startswith("drain: ")
        kinds = [(e["kind"], e["subject"]) for e in events.rows]
        assert ("replica_stopped", rep.name) in kinds and ("node_gone", rep.node) in kinds
        replicas.close()
        kinds = [(e["kind"], e["subject"]) for e in events.rows]
        assert kinds.count(("replica_stopped", rep.name)) == 1  # once, whoever stopped it
    finally:
        replicas.close()
        lb.stop()
