"""A request a spot interruption cuts before its first token (llama.cpp sends its response
head with the first token, so its killed replica leaves HAProxy nothing to relay) is
answered 502 by HAProxy itself. That answer names the replica HAProxy chose, and the load
generator records such a request as `spot_interruption` and resends it like the other cut
ones; it used to be a plain `http_error` with no replica, neither lost nor resent. Real
HAProxy in front of the hostile server (`close_before_headers`: the connection closes before
a byte of the answer), a real load run."""

from __future__ import annotations

import time

import httpx
import pytest
from servingbench.resources.loadgen import run_load
from servingbench.resources.loadgen.interrupted import CUT, MAX_RESENDS, may_be_cut
from servingbench.resources.model_server.fleet.balancer import HEADER, Balancer, find_haproxy
from servingbench.resources.model_server.fleet.events import Events

from tests.support.hostile import HostileProcess
from tests.support.loadgen import config, rows

pytestmark = pytest.mark.skipif(find_haproxy() is None,
                                reason="haproxy is not installed (make haproxy)")


def test_haproxys_own_502_names_the_replica_it_chose(tmp_path):
    hostile = HostileProcess(tmp_path)
    try:
        with Balancer() as lb:
            lb.add("r0", hostile.port)
            r = httpx.post(f"{lb.base_url}/v1/completions", trust_env=False, timeout=30,
                           headers={"X-Request-ID": "x1", "X-Hostile": "close_before_headers"},
                           json={"model": "m", "prompt": "hi", "max_tokens": 2})
            assert r.status_code == 502 and r.headers.get(HEADER) == "r0"
            lb.remove("r0")
            r = httpx.post(f"{lb.base_url}/v1/completions", trust_env=False, timeout=30,
                           json={"model": "m", "prompt": "hi", "max_tokens": 2})
            assert r.status_code == 503 and HEADER not in r.headers  # no server was chosen
    finally:
        hostile.stop()


def test_a_request_cut_before_its_first_token_is_interrupted_and_resent(tmp_path):
    assert may_be_cut("http_error", 502) and may_be_cut("disconnect", None)
    assert not may_be_cut("http_error", 500) and not may_be_cut("timeout", None)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    events = Events(run_dir, "run-cut")
    hostile = HostileProcess(tmp_path)
    try:
        with Balancer() as lb:
            lb.add("r0", hostile.port)
            events.add("replica_ready", "r0", time.time_ns() - 10**9, detail="node-r0")
            events.add("interruption_notice", "node-r0", time.time_ns() - 10**9)
            # the probe (no request id) is answered cleanly; every measured request is cut
            cfg = config(lb.base_url, concurrency=[1], requests_per_step=1,
                         retry_interrupted=True, use_tokenize=False,
                         headers={"X-Hostile": "close_before_headers"})
            run_load(cfg, run_dir, progress=False)
    finally:
        hostile.stop()
    steady = rows(run_dir)
    assert len(steady) == 1 + MAX_RESENDS  # the first, then its resends, each cut again
    first = next(r for r in steady if r["retry_of"] is None)
    assert (first["status"], first["http_status"], first["replica"]) == ("http_error", 502, "r0")
    assert {r["error"] for r in steady} == {CUT}
