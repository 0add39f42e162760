"""The `/metrics` of a pool of real engine replicas: every replica's counters summed (a
stopped replica's last ones, its gauges no more), and HAProxy's own 503 answers counted as
finished requests, served at the balancer's `/metrics` by a real HAProxy."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from servingbench.resources.http.prometheus import parse
from servingbench.resources.model_server.fleet.balancer import Balancer, find_haproxy
from servingbench.resources.model_server.fleet.summed_metrics import SummedMetrics, summed

A = """# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 30
servingbench:requests_finished_total{status="200"} 3
llamacpp:requests_processing 1
"""
OPEN = urllib.request.build_opener(urllib.request.ProxyHandler({})).open  # loopback only
B = """llamacpp:tokens_predicted_total 12
servingbench:requests_finished_total{status="200"} 2
llamacpp:requests_processing 1
"""


def test_counters_sum_over_live_and_stopped_replicas_gauges_over_live_only():
    out = parse(summed([A], [B], refused=4))
    assert out["llamacpp:tokens_predicted_total"] == [({}, 42.0)]
    assert sorted(out["servingbench:requests_finished_total"], key=lambda s: s[0]["status"]) == [
        ({"status": "200"}, 5.0), ({"status": "503"}, 4.0)]
    assert out["llamacpp:requests_processing"] == [({}, 1.0)]  # the stopped one's is gone


@pytest.mark.skipif(find_haproxy() is None, reason="haproxy is not installed (make haproxy)")
def test_the_balancer_serves_the_pool_s_metrics_and_counts_its_own_503s():
    class Rep:  # a stopped replica: its last exposition is all that is left of it
        state, metrics_url, final_metrics = "stopped", None, B

    class Reps:
        replicas = {"r0": Rep()}

    with SummedMetrics() as pm, Balancer(metrics_port=pm.port) as lb:
        pm.replicas, pm.balancer = Reps(), lb
        for _ in range(3):  # no replica in the pool: HAProxy answers these itself
            with pytest.raises(urllib.error.HTTPError) as err:
                OPEN(f"{lb.base_url}/v1/completions", timeout=5)
            assert err.value.code == 503
        with OPEN(f"{lb.base_url}/metrics", timeout=5) as resp:
            out = parse(resp.read().decode())
    assert out["llamacpp:tokens_predicted_total"] == [({}, 12.0)]
    assert ({"status": "503"}, 3.0) in out["servingbench:requests_finished_total"]
