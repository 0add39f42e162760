"""Cold-start phases from hand-made pod records; retry classes against moto via the proxy."""

from __future__ import annotations

import pytest
from servingbench.resources.aws.caller import AwsCallError, Caller
from servingbench.resources.billing.cost_explorer import CostExplorerApi
from servingbench.resources.contract.timestamps import parse_ts
from servingbench.resources.model_server.kube.coldstart import cold_start_phases, manifest_phases

from tests.support.eks.billdata import INSTANCE, NODES_DOWN, NODES_UP, NOW, RUN_ID
from tests.support.eks.fakes import ErrorProxy


def pod(conditions=(), started=None, created="2026-11-29T02:00:00Z"):
    return {"metadata": {"creationTimestamp": created}, "status": {
        "conditions": [{"type": t, "status": "True", "lastTransitionTime": at} for t, at in conditions],
        "containerStatuses": [{"name": "engine", "state": {"running": {"startedAt": started}}}]
        if started else []}}


def test_unknown_boundaries_stay_none_never_guessed():
    p = pod([("PodScheduled", "2026-11-29T02:00:02Z"), ("Ready", "2026-11-29T02:10:00Z")],
            started="2026-11-29T02:01:00Z")
    events = [{"reason": "Pulled", "firstTimestamp": "2026-11-29T02:00:59Z"}]  # image cached
    phases = cold_start_phases(p, events, ["2026-11-29T02:01:00.5Z INFO starting"], "vllm")
    assert phases["scheduling"] == (parse_ts("2026-11-29T02:00:00Z"), parse_ts("2026-11-29T02:00:02Z"))
    assert phases["image_pull"] is None  # no Pulling event
    assert phases["weights_load"] is None and phases["compile"] is None  # no log markers
    assert phases["ready"] is None
    assert manifest_phases(phases) == {}


def test_sglang_markers_and_a_pull_retried_twice():
    p = pod([("PodScheduled", "2026-11-29T02:00:01Z"), ("Ready", "2026-11-29T02:09:00Z")],
            started="2026-11-29T02:03:00Z")
    events = [{"reason": "Pulling", "firstTimestamp": "2026-11-29T02:00:05Z"},
              {"reason": "Pulling", "firstTimestamp": "2026-11-29T02:01:00Z"},
              {"reason": "Pulled", "eventTime": "2026-11-29T02:02:30.250000Z"}]
    log = ["2026-11-29T02:06:00.000000001Z [2026] Load weight end. type=MllamaForCausalLM",
           "2026-11-29T02:08:00Z Capture cuda graph end. Time elapsed: 110 s"]
    phases = cold_start_phases(p, events, log, "sglang")
    assert phases["image_pull"] == (parse_ts("2026-11-29T02:00:05Z"),
                                    parse_ts("2026-11-29T02:02:30.250000Z"))
    assert phases["weights_load"][1] - phases["weights_load"][0] == 180 * 10**9 + 1
    assert phases["compile"][1] - phases["compile"][0] == 120 * 10**9 - 1
    assert phases["ready"][1] - phases["ready"][0] == 60 * 10**9


def test_transient_5xx_is_retried_then_succeeds(moto):
    endpoint, session = moto
    sleeps: list[float] = []
    with ErrorProxy(endpoint, "GetCostAndUsage", "ServiceUnavailable", times=1, status=503) as p:
        ce = CostExplorerApi(session, endpoint_url=p.url, clock=lambda: NOW,
                                 caller=Caller(sleep=sleeps.append))
        ce.fetch_bill(RUN_ID, INSTANCE, "us-east-1", NODES_UP, NODES_DOWN)
    assert len(sleeps) == 1 and ce.last_fetch.api_calls == 2


def test_other_client_errors_fail_at_once(moto):
    endpoint, session = moto
    with ErrorProxy(endpoint, "GetCostAndUsage", "BillExpirationException", times=1) as p:
        ce = CostExplorerApi(session, endpoint_url=p.url, clock=lambda: NOW,
                                 caller=Caller(sleep=lambda s: pytest.fail("no retry")))
        with pytest.raises(AwsCallError, match="BillExpirationException"):
            ce.fetch_bill(RUN_ID, INSTANCE, "us-east-1", NODES_UP, NODES_DOWN)
    assert ce.call.calls["ce:GetCostAndUsage"] == 1
