"""Apply / wait / cold-start / delete against a fake Kubernetes API on 127.0.0.1, with a
real STS-presigned EKS token made from the dummy credentials."""

from __future__ import annotations

import base64
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
from servingbench.resources.contract.timestamps import parse_ts
from servingbench.resources.model_server.kube.client import KubeClient, KubeError, RolloutError
from servingbench.resources.model_server.kube.coldstart import manifest_phases
from servingbench.resources.model_server.kube.deploy import EngineDeployment
from servingbench.resources.model_server.kube.token import TokenSource, presigned_token

from tests.support.eks.aws import DUMMY_KEY_ID, REGION
from tests.support.eks.fake_kube import POD_STORY
from tests.support.eks.fake_kube import FakeKubeApi as Api
from tests.support.eks.specs import VLLM_GPU

NS = 10**9


def client(api, session, **kw):
    token = TokenSource.for_eks(session, "bench", REGION)
    return KubeClient(api.url, token, sleep=lambda s: None, **kw)


def test_token_is_a_presigned_get_caller_identity_url(aws_env):
    token = presigned_token(boto3.Session(), "bench", REGION)
    assert token.startswith("k8s-aws-v1.") and "=" not in token
    b64 = token.removeprefix("k8s-aws-v1.")
    url = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).decode()
    parts = urlsplit(url)
    q = {k: v[0] for k, v in parse_qs(parts.query).items()}
    assert parts.netloc == "sts.us-east-1.amazonaws.com"
    assert q["Action"] == "GetCallerIdentity" and q["X-Amz-Expires"] == "60"
    assert q["X-Amz-SignedHeaders"] == "host;x-k8s-aws-id"
    assert q["X-Amz-Credential"].startswith(DUMMY_KEY_ID + "/")


def test_token_source_caches_and_refreshes():
    made = []
    now = [0.0]
    src = TokenSource(lambda: made.append(1) or f"t{len(made)}", refresh_s=600,
                      clock=lambda: now[0])
    assert src() == "t1" and src() == "t1"
    now[0] = 601
    assert src() == "t2" and "t2" not in repr(src)


def test_deploy_waits_records_cold_start_and_deletes(aws_env):
    session = boto3.Session()
    with Api(cluster="bench", key_id=DUMMY_KEY_ID, ready_after=3) as api:
        kube = client(api, session)
        dep = EngineDeployment(kube, VLLM_GPU, clock=lambda: 5 * NS)
        with dep.deployed(timeout_s=60, poll_s=0) as engine:
            assert len(api.objects) == 4 and api.polls >= 3
            assert engine.endpoint == (f"http://{VLLM_GPU.name}.servingbench.svc.cluster.local:8000")
        assert api.objects == {}  # deleted on the way out
    applies = [r for r in api.requests if r["method"] == "PATCH"]
    # the key and the policy exist before the pod can start
    assert [r["path"].split("/")[-2] for r in applies] == [
        "secrets", "networkpolicies", "deployments", "services"]
    assert all(r["query"]["force"] == "true" for r in applies)
    p = engine.phases
    ts = parse_ts
    assert p["scheduling"] == (ts(POD_STORY["created"]), ts(POD_STORY["scheduled"]))
    assert p["image_pull"] == (ts("2026-11-29T02:09:15Z"), ts("2026-11-29T02:12:02Z"))
    assert p["weights_load"] == (ts("2026-11-29T02:12:05Z"), ts("2026-11-29T02:19:30.123456789Z"))
    assert p["compile"] == (ts("2026-11-29T02:19:30.123456789Z"),
                            ts("2026-11-29T02:21:35.000000001Z"))
    assert p["ready"] == (ts("2026-11-29T02:21:35.000000001Z"), ts("2026-11-29T02:21:40Z"))
    # hand-computed: 167 s pull, 445.123456789 s weights, 124.876543212 s compile
    assert (p["image_pull"][1] - p["image_pull"][0]) == 167 * NS
    assert (p["weights_load"][1] - p["weights_load"][0]) == 445_123_456_789
    assert (p["compile"][1] - p["compile"][0]) == 124_876_543_212
    phases = manifest_phases(p)
    assert list(phases) == ["image_pull", "weights_load", "compile", "ready"]
    assert phases["compile"]["ended_at"] == "2026-11-29T02:21:35.000000001Z"


def test_stuck_image_pull_fails_fast_and_still_deletes(aws_env):
    with Api(cluster="bench", key_id=DUMMY_KEY_ID, stuck="ImagePullBackOff") as api:
        dep = EngineDeployment(client(api, boto3.Session()), VLLM_GPU)
        with pytest.raises(RolloutError, match="container engine: ImagePullBackOff: manifest unknown"):
            with dep.deployed(timeout_s=3600, poll_s=0):
                pytest.fail("never ready")
        assert api.objects == {}


def test_rollout_timeout_is_bounded(aws_env):
    now = [0.0]

    def tick(_s):
        now[0] += 10

    with Api(cluster="bench", key_id=DUMMY_KEY_ID, ready_after=10**6) as api:
        kube = KubeClient(api.url, TokenSource.for_eks(boto3.Session(), "bench", REGION),
                          sleep=tick, clock=lambda: now[0])
        EngineDeployment(kube, VLLM_GPU).apply()
        with pytest.raises(RolloutError, match=r"not ready within 60s \(ready 0/1\)"):
            kube.wait_ready(VLLM_GPU.name, timeout_s=60, poll_s=10)
        assert 6 <= api.polls <= 8


def test_a_rejected_token_is_a_clear_error_without_the_token(aws_env):
    with Api(cluster="bench", key_id="AKIASOMEONEELSE00000") as api:
        kube = client(api, boto3.Session())
        with pytest.raises(KubeError, match="HTTP 401: Unauthorized: unexpected credential") as err:
            kube.get("Deployment", "x")
        assert err.value.status == 401 and "k8s-aws-v1" not in str(err.value)


def test_a_failed_service_delete_does_not_skip_the_rest(aws_env):
    session = boto3.Session()
    with Api(cluster="bench", key_id=DUMMY_KEY_ID) as api:
        kube = client(api, session)
        dep = EngineDeployment(kube, VLLM_GPU, clock=lambda: 5 * NS)
        dep.apply()
        service = next(p for p, o in api.objects.items() if o["kind"] == "Service")
        api.fail_delete.add(service)
        with pytest.raises(KubeError, match=r"teardown incomplete.*Service/.*HTTP 500"):
            dep.delete()
        assert sorted(o["kind"] for o in api.objects.values()) == ["Service"]
        assert sorted(d.split("/")[0] for d in api.deleted) == [
            "Deployment", "NetworkPolicy", "Secret"]
