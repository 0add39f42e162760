"""Node and replica events from the Kubernetes API (resources/model_server/kube/events.py),
against the fake API server over real HTTP: a node group's Nodes come, become Ready, are
cordoned for a spot interruption and go; the engine pod's start-up phases come from its
conditions, events and log markers; events.parquet has contract §2.6's exact columns."""

from __future__ import annotations

import boto3
import pyarrow.parquet as pq
import pytest
from servingbench.resources.contract.schemas import EVENT_KINDS, EVENTS, REPLICA_PHASES
from servingbench.resources.contract.timestamps import parse_ts
from servingbench.resources.model_server.fleet.events import Events
from servingbench.resources.model_server.kube import events as kev
from servingbench.resources.model_server.kube.client import KubeClient
from servingbench.resources.model_server.kube.deploy import EngineDeployment
from servingbench.resources.model_server.kube.token import TokenSource

from tests.support.eks.aws import DUMMY_KEY_ID, REGION
from tests.support.eks.fake_kube import FakeKubeApi
from tests.support.eks.specs import VLLM_GPU

T = "2026-11-29T02:"
NG = VLLM_GPU.nodegroup


def node(name: str, created: str, ready: str | None = None, cordoned: str | None = None,
         group: str = NG) -> dict:
    spec: dict = {}
    if cordoned:
        spec = {"unschedulable": True, "taints": [{"key": "node.kubernetes.io/unschedulable",
                                                   "effect": "NoSchedule", "timeAdded": cordoned}]}
    conditions = [{"type": "Ready", "status": "True", "lastTransitionTime": ready}] if ready else []
    return {"metadata": {"name": name, "creationTimestamp": created,
                         "labels": {kev.NODEGROUP_NODE_LABEL: group}},
            "spec": spec, "status": {"conditions": conditions}}


def ns(text: str) -> int:
    return parse_ts(text)


def test_node_and_replica_events_from_the_api(aws_env, tmp_path):
    token = TokenSource.for_eks(boto3.Session(), "bench", REGION)
    clock = iter(ns(T + f"{m}:00Z") for m in range(30, 60)).__next__
    with FakeKubeApi(cluster="bench", key_id=DUMMY_KEY_ID) as api:
        kube = KubeClient(api.url, token, sleep=lambda s: None)
        api.nodes["a"] = node("a", T + "05:00Z")  # registered, not Ready yet
        api.nodes["other"] = node("other", T + "05:00Z", T + "06:00Z", group="sb-someone-else")
        run = kev.RunEvents(kube, VLLM_GPU, NG, clock=clock,
                            sink=Events(tmp_path, VLLM_GPU.run_id))
        with EngineDeployment(kube, VLLM_GPU).deployed(timeout_s=60, poll_s=0):
            run.poll()                                                   # 02:30
            api.nodes["a"] = node("a", T + "05:00Z", T + "06:30Z")
            api.nodes["b"] = node("b", T + "20:00Z", T + "21:05Z")
            run.poll()                                                   # 02:31
            api.nodes["b"] = node("b", T + "20:00Z", T + "21:05Z", cordoned=T + "31:30Z")
            run.poll()                                                   # 02:32
            del api.nodes["b"]
            run.poll()                                                   # 02:33
        del api.nodes["a"]
        run.poll()                                                       # 02:34: pod gone too
    pod = VLLM_GPU.name + "-7d9f8c6b5-x2x4q"
    got = [(e[0], e[1], e[2], None if e[3] is None else round(e[3], 9), e[4]) for e in run.events]
    assert got == [
        (ns(T + "05:00Z"), "node_requested", "a", None, None),
        (ns(T + "09:12Z"), "replica_requested", pod, None, None),
        (ns(T + "12:02Z"), "replica_phase", pod, 167.0, "image_pull"),
        (ns(T + "19:30.123456789Z"), "replica_phase", pod, 445.123456789, "weights_load"),
        (ns(T + "21:35.000000001Z"), "replica_phase", pod, 124.876543212, "compile"),
        (ns(T + "21:40Z"), "replica_phase", pod, 4.999999999, "ready"),
        (ns(T + "21:40Z"), "replica_ready", pod, None, None),
        (ns(T + "06:30Z"), "node_ready", "a", None, None),
        (ns(T + "20:00Z"), "node_requested", "b", None, None),
        (ns(T + "21:05Z"), "node_ready", "b", None, None),
        (ns(T + "31:30Z"), "interruption_notice", "b", None, None),
        (ns(T + "33:00Z"), "interruption", "b", None, None),
        (ns(T + "34:00Z"), "node_gone", "a", None, None),
        (ns(T + "34:00Z"), "replica_stopped", pod, None, None),
    ]
    assert {e[1] for e in run.events} <= set(EVENT_KINDS)
    assert {e[4] for e in run.events if e[1] == "replica_phase"} <= set(REPLICA_PHASES)
    table = pq.read_table(tmp_path / "events.parquet")
    assert table.schema.equals(EVENTS) and table.num_rows == len(run.events)
    assert table.column_names == ["run_id", "at", "kind", "subject", "value", "detail"]
    assert set(table.column("run_id").to_pylist()) == {VLLM_GPU.run_id}
    at = table.column("at").cast("int64").to_pylist()
    assert at == sorted(at) and at[0] == ns(T + "05:00Z")


def test_a_pod_on_a_node_carries_it_in_detail():
    pod = {"metadata": {"name": "p", "creationTimestamp": T + "00:00Z"},
           "spec": {"nodeName": "ip-10-0-1-5.ec2.internal"},
           "status": {"conditions": [{"type": "Ready", "status": "True",
                                      "lastTransitionTime": T + "05:00Z"}]}}
    out = kev.replica_events(pod, [], [], "vllm")
    assert [(e[1], e[4]) for e in out] == [("replica_requested", "ip-10-0-1-5.ec2.internal"),
                                           ("replica_ready", "ip-10-0-1-5.ec2.internal")]


@pytest.mark.parametrize("lines, want", [
    ([T + "01:00.0Z INFO ||NEURON_CC_WRAPPER||: Using a cached neff at /c/MODULE_1/model.neff."],
     "hit"),
    ([T + "01:00.0Z INFO ||NEURON_CC_WRAPPER||: Using a cached neff at /c/MODULE_1/model.neff.",
      T + "01:01.0Z INFO ||NEURON_CC_WRAPPER||: Call compiler with cmd: ['neuronx-cc', ...]"],
     "miss"),
    ([T + "01:00.0Z INFO Finished loading model"], None),
])
def test_neuron_compile_cache_hit_or_miss(lines, want):
    assert kev.compile_cache(lines, "vllm-neuron") == want


def test_an_engine_without_cache_markers_says_nothing():
    line = T + "01:00.0Z INFO Using a cached neff at /c/model.neff"
    assert kev.compile_cache([line], "vllm") is None


def test_a_notice_from_ec2_names_the_node_once():
    """FIS/EC2 reports the instance: its Node gets the notice at EC2's time, and its later
    cordon adds no second one; an instance that is no Node of the run is ignored."""
    watch = kev.NodeWatch()
    n = node("ip-10-0-1-5", T + "05:00Z", T + "06:00Z")
    n["spec"]["providerID"] = "aws:///us-east-1a/i-0abc"
    watch.observe([n], ns(T + "10:00Z"))
    assert watch.notice("i-0fff", ns(T + "20:00Z")) == []
    assert watch.notice("i-0abc", ns(T + "20:00Z")) == [
        (ns(T + "20:00Z"), "interruption_notice", "ip-10-0-1-5", None, "instance i-0abc")]
    cordoned = node("ip-10-0-1-5", T + "05:00Z", T + "06:00Z", cordoned=T + "20:05Z")
    assert watch.observe([cordoned], ns(T + "21:00Z")) == []
    assert watch.observe([], ns(T + "22:00Z")) == [
        (ns(T + "22:00Z"), "interruption", "ip-10-0-1-5", None, None)]
