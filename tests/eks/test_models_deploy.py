"""A `models` candidate through the eks ModelServer (kube/models_deploy.py) against the fake
Kubernetes API, with a real HTTP server on 127.0.0.1 per model standing in for its vLLM
pod (the sleep-mode endpoints and a chat route): the engines deploy one at a time, a
swapped one sleeps before the next starts, one endpoint routes by the request's `model`
and swaps through the swap driver's process, events.parquet holds every load, sleep and
wake, and every object is deleted after the block."""

from __future__ import annotations

import json
import os
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

import boto3
import httpx
import pyarrow.parquet as pq
import pytest
from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.contract.deployment import SeveralModels
from servingbench.resources.contract.scope import ClusterInfo
from servingbench.resources.model_server.kube.client import KubeClient
from servingbench.resources.model_server.kube.server import KubeModelServer
from servingbench.resources.model_server.kube.token import TokenSource

from tests.support.eks.aws import DUMMY_KEY_ID, REGION
from tests.support.eks.fake_kube import FakeKubeApi
from tests.support.eks.fakes import LoopbackServer
from tests.support.eks.specs import DIGEST

RUN_ID = "20261203T070000Z-p5.48xlarge-scout-models-1a2b"
NG = "sb-20261203T070000Z-p5-48xlarge-scout-models-0a1b2c3d"
SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"


def _model(name, placement, share, level=None, precision="bf16", requests=0.33):
    return {"name": name, "model": SCOUT, "model_revision": None, "precision": precision,
            "placement": placement, "memory_share": share, "request_share": requests,
            "sleep_level": level}


CANDIDATE = Candidate(
    name="p5-scout-models", instance_type="p5.48xlarge", model=SCOUT, precision="bf16",
    tensor_parallel=8, image_digest=f"vllm/vllm-openai@{DIGEST}",
    deployment=SeveralModels.of([_model("m-one", "swapped", 0.6, 1, requests=0.34),
                                 _model("m-two", "swapped", 0.6, 2, "fp8"),
                                 _model("m-res", "resident", 0.3)]))


class StandInPod(LoopbackServer):
    """One model's vLLM pod: `/health`, `/is_sleeping`, `/sleep?level=N`, `/wake_up` (no API key, as
    vLLM serves them outside /v1), `/version`, and `/v1/chat/completions` answering with
    its served name (503 while asleep, as a sleeping vLLM processes nothing)."""

    def __init__(self, name: str, api: FakeKubeApi):
        self.name, self.sleeping, self.calls = name, False, []
        self.deployments_at_sleep: list[list[str]] = []
        pod = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self):
                url = urlsplit(self.path)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                pod.calls.append((self.command, url.path, parse_qs(url.query),
                                  self.headers.get("Authorization")))
                if url.path == "/is_sleeping":
                    return self._send(200, {"is_sleeping": pod.sleeping})
                if url.path == "/sleep" and self.command == "POST":
                    pod.deployments_at_sleep.append(sorted(
                        o["metadata"]["name"] for o in api.objects.values()
                        if o["kind"] == "Deployment"))
                    pod.sleeping = True
                    return self._send(200, {})
                if url.path == "/wake_up" and self.command == "POST":
                    pod.sleeping = False
                    return self._send(200, {})
                if url.path == "/health":
                    return self._send(200, {})
                if url.path == "/version":
                    return self._send(200, {"version": "0.11.0"})
                if url.path == "/v1/chat/completions":
                    if pod.sleeping:
                        return self._send(503, {"error": "asleep"})
                    asked = json.loads(body)["model"]
                    return self._send(200 if asked == pod.name else 404, {"model": pod.name})
                return self._send(404, {})

            do_GET = do_POST = _handle

        self._serve(Handler)

    @property
    def address(self) -> tuple[str, int]:
        return "127.0.0.1", self.server.server_address[1]


def test_several_models_deploy_route_swap_and_go(aws_env, tmp_path):
    info = ClusterInfo(facts={"nodegroup": NG}, phases={}, host={}, handle=None)
    with FakeKubeApi(cluster="bench", key_id=DUMMY_KEY_ID, ready_after=2) as api:
        pods = {m.name: StandInPod(m.name, api) for m in CANDIDATE.deployment.models}
        for p in pods.values():
            p.__enter__()
        try:
            def kube():
                return KubeClient(api.url, TokenSource.for_eks(boto3.Session(), "bench", REGION),
                                  sleep=lambda s: None)

            def address(service: str) -> tuple[str, int]:
                (name,) = [n for n in pods if service.endswith("-" + n)]
                return pods[name].address

            server = KubeModelServer(kube, expose="cluster_ip", poll_s=0,
                                     service_address=address)
            run_dir = tmp_path / RUN_ID
            with server.deploy(CANDIDATE, info, run_dir) as dep:
                kinds = sorted(o["kind"] for o in api.objects.values())
                assert kinds == ["Deployment"] * 3 + ["NetworkPolicy"] * 3 + ["Secret"] \
                    + ["Service"] * 3
                deployments = {o["metadata"]["annotations"]["servingbench/model"]:
                               o["metadata"]["name"]
                               for o in api.objects.values() if o["kind"] == "Deployment"}
                # m-one slept before m-two's engine was applied; m-two, the last swapped, is awake
                assert pods["m-one"].deployments_at_sleep == [[deployments["m-one"]]]
                assert pods["m-one"].sleeping and not pods["m-two"].sleeping
                assert dep.endpoint.startswith("http://127.0.0.1:") and not dep.emulated
                assert dep.served_model == "m-one" and dep.facts["engine_version"] == "0.11.0"
                key = os.environ[dep.api_key_env]
                auth = {"Authorization": f"Bearer {key}"}
                with httpx.Client(base_url=dep.endpoint, timeout=30, trust_env=False) as http:
                    for name in ("m-one", "m-res", "m-one", "m-two"):
                        r = http.post("/v1/chat/completions", headers=auth,
                                      json={"model": name, "messages": []})
                        assert (r.status_code, r.json()["model"]) == (200, name)
                assert pods["m-one"].sleeping and not pods["m-two"].sleeping
            assert api.objects == {}
            assert dep.api_key_env not in os.environ
        finally:
            for p in pods.values():
                p.__exit__(None, None, None)
    chats = [c for c in pods["m-one"].calls if c[1] == "/v1/chat/completions"]
    assert len(chats) == 2 and {c[3] for c in chats} == {f"Bearer {key}"}
    sleeps = [(c[0], c[1], c[2]) for c in pods["m-two"].calls if c[1] in ("/sleep", "/wake_up")]
    # the swap to m-one put m-two to sleep at its level; the swap back woke it; no model= query
    assert sleeps == [("POST", "/sleep", {"level": ["2"]}), ("POST", "/wake_up", {})]
    assert not [c for c in pods["m-res"].calls if c[1] in ("/sleep", "/wake_up")]
    assert all(any(c[1] == "/health" for c in p.calls) for p in pods.values())
    table = pq.read_table(run_dir / "events.parquet").to_pylist()
    seen = [(r["kind"], r["subject"]) for r in table]
    assert sorted(s for k, s in seen if k == "model_load") == ["m-one", "m-res", "m-two"]
    assert [s for k, s in seen if k == "model_sleep"] == ["m-one", "m-two", "m-one"]
    assert [s for k, s in seen if k == "model_wake"] == ["m-one", "m-two"]
    assert {r["run_id"] for r in table} == {RUN_ID}
    assert all(r["value"] is not None and r["value"] >= 0 for r in table)


def test_models_on_spot_are_refused_before_any_kubernetes_call(tmp_path):
    from dataclasses import replace

    server = KubeModelServer(lambda: pytest.fail("no cluster is touched"), expose="cluster_ip")
    info = ClusterInfo(facts={"nodegroup": NG}, phases={}, host={}, handle=None)
    bad = replace(CANDIDATE, capacity="spot")
    assert server.refuses(bad).startswith("models: several models on one node run on on-demand")
    assert server.refuses(CANDIDATE) is None
    with pytest.raises(ValueError, match="candidate p5-scout-models: models: .*on-demand"):
        with server.deploy(bad, info, tmp_path / RUN_ID):
            pytest.fail("never deployed")


def test_the_candidates_file_refuses_models_with_replicas_naming_the_key(tmp_path):
    from servingbench.pipelines.catalog import load_candidates
    from servingbench.pipelines.config import ConfigError

    entry = "{{name: {}, model: " + SCOUT + ", precision: bf16, placement: resident, " \
        "memory_share: 0.4, request_share: 0.5}}"
    path = tmp_path / "candidates.yaml"
    path.write_text("candidates:\n  - {name: two, instance_type: p5.48xlarge, model: " + SCOUT
                    + ", precision: bf16, tensor_parallel: 8, replicas: {min: 1, max: 2}, "
                    f"models: [{entry.format('a')}, {entry.format('b')}]}}\n")
    with pytest.raises(ConfigError, match=r"candidates\[0\]\.replicas: several models on one "
                                          "node are served by one replica"):
        load_candidates(path)
    path.write_text(path.read_text().replace("replicas: {min: 1, max: 2}, ", ""))
    load_candidates(path)  # without them it loads


def test_load_pods_refuse_a_models_candidate():
    from servingbench.resources.loadjob.generator import LoadConfigError, pod_config

    # the check comes before the load generator is asked for anything
    with pytest.raises(LoadConfigError, match=r"p5-scout-models\.models: not supported with "
                                              "load pods"):
        pod_config(None, CANDIDATE, "http://127.0.0.1:9", "m-one", RUN_ID, 2, api_key=True)
