"""The local autoscaler reads its replicas' /metrics directly, never through a proxy the
environment names (a recording proxy on 127.0.0.1 sees nothing), and a reading it could not
take is not a reading of 0: the round decides nothing, so a replica that stalls (SIGSTOP,
its /metrics never answers) never scales the pool down. Real emulator replicas behind real
HAProxy."""

from __future__ import annotations

import os
import signal
import urllib.request

import pytest
from servingbench.resources.model_server.fleet.autoscale_loop import Autoscaler
from servingbench.resources.model_server.fleet.autoscale_rule import Policy
from servingbench.resources.model_server.fleet.balancer import Balancer, find_haproxy
from servingbench.resources.model_server.fleet.events import Events
from servingbench.resources.model_server.fleet.replicas import ReplicaSet

from tests.support.emulator import fixed_timing_args
from tests.support.proxy import RecordingProxy

pytestmark = pytest.mark.skipif(find_haproxy() is None,
                                reason="haproxy is not installed (make haproxy)")


def _policy() -> Policy:
    # one request running per replica: an idle pool of two wants one, at once
    return Policy("requests_running", target=1.0, activation_target=0.0,
                  scale_down_cooldown_s=0.0, min_replicas=1, max_replicas=2)


@pytest.mark.timeout(120)
def test_the_autoscaler_ignores_proxy_variables(tmp_path, monkeypatch):
    events = Events(tmp_path, "run-p")
    with Balancer() as lb:
        replicas = ReplicaSet(lambda name: fixed_timing_args(20, 5), lb, events)
        try:
            replicas.start(wait=True)
            proxy = RecordingProxy()
            for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
                monkeypatch.setenv(name, proxy.url)
            monkeypatch.delenv("NO_PROXY", raising=False)
            monkeypatch.delenv("no_proxy", raising=False)
            # as in a process started with the variables set: urllib builds its default
            # opener, proxies included, from the environment at its first use
            monkeypatch.setattr(urllib.request, "_opener", None)
            scaler = Autoscaler(_policy(), replicas, lb, events, initial=1)
            total, read = scaler.reading()
            assert read == "requests_running=0 over 1 ready replicas"
            assert proxy.seen == []
            proxy.close()
        finally:
            replicas.close()


@pytest.mark.timeout(120)
def test_a_failed_read_holds_the_pool_instead_of_scaling_it_down(tmp_path):
    events = Events(tmp_path, "run-f")
    with Balancer() as lb:
        replicas = ReplicaSet(lambda name: fixed_timing_args(20, 5), lb, events)
        stalled = None
        try:
            replicas.start(wait=True)
            replicas.start(wait=True)
            scaler = Autoscaler(_policy(), replicas, lb, events, initial=2)
            stalled = replicas.ready[0].proc.pid
            os.kill(stalled, signal.SIGSTOP)  # its /metrics never answers now
            assert scaler.tick(now=100.0) == 2
            assert replicas.count() == 2 and scaler.failed_reads == 1
            assert [e for e in events.rows if e["kind"] == "scale_decision"] == []
            os.kill(stalled, signal.SIGCONT)
            stalled = None
            assert scaler.tick(now=101.0) == 1  # read again: idle, one is enough
        finally:
            if stalled is not None:
                os.kill(stalled, signal.SIGCONT)
            replicas.close()
