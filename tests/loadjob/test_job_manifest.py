"""The load Job's manifest: a valid batch/v1 Job for Kubernetes 1.33 (strict schema), an
Indexed Job of N pods that never retries an index, locked down, kept off the engine's
nodes, placed where the settings say."""

from __future__ import annotations

import kubernetes_validate
import pytest
from servingbench.resources.loadjob.render import (
    ENGINE_LABELS,
    LoadJobSpec,
    api_key_secret,
    job_name,
    render,
)
from servingbench.resources.model_server.kube.render import labels as engine_labels
from servingbench.resources.model_server.kube.render import network_policy

from tests.support.eks.specs import DIGEST, VLLM_GPU

K8S = "1.33"
RUN = "20261129T020000Z-p5.48xlarge-p5-scout-bf16-tp8-7f3a"


def spec(**kw) -> LoadJobSpec:
    base = dict(run_id=RUN, pods=4, image=f"123456789012.dkr.ecr.us-east-1.amazonaws.com/"
                f"servingbench@{DIGEST}",
                upload_uri=f"s3://sb-runs/nightly/runs/{RUN}",
                start_at="2026-11-29T02:30:00.000000000Z", owner="sb-test-install",
                service_account="servingbench-loadgen",
                node_selector=(("eks.amazonaws.com/nodegroup", "load-cpu"),),
                tolerations=(("servingbench/load", "true", "NoSchedule"),), api_key=True,
                env=(("AWS_REGION", "us-east-1"),))
    return LoadJobSpec(**(base | kw))


def test_the_job_and_its_secret_are_valid_kubernetes_objects():
    s = spec()
    for obj in (render(s), api_key_secret(s, "not-a-real-key")):
        kubernetes_validate.validate(obj, K8S, strict=True)


def test_schema_validation_can_fail():
    job = render(spec())
    job["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "Sometimes"
    job["spec"]["completionsMode"] = "Indexed"  # misspelt: strict mode refuses it
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, K8S, strict=True)


def test_an_indexed_job_of_n_pods_that_never_retries_and_is_bounded():
    job = render(spec(pods=7, deadline_s=5400))
    js = job["spec"]
    assert (js["completionMode"], js["completions"], js["parallelism"]) == ("Indexed", 7, 7)
    assert js["backoffLimitPerIndex"] == 0 and js["template"]["spec"]["restartPolicy"] == "Never"
    assert js["activeDeadlineSeconds"] == 5400 and js["ttlSecondsAfterFinished"] > 0
    (c,) = js["template"]["spec"]["containers"]
    assert c["command"] == ["servingbench"] and c["args"][:2] == ["loadpod", "--upload"]
    head, tail = c["args"][:c["args"].index("--")], c["args"][c["args"].index("--"):]
    # what to run is the run's load config under --upload, never a copy of the plan in flags
    assert head[head.index("--config") + 1] == "load_config.json"
    assert tail == ["--", "--no-progress", "--worker-index", "env", "--worker-count", "7",
                    "--start-at", "2026-11-29T02:30:00.000000000Z"]
    assert job["metadata"]["annotations"]["servingbench/start-at"] == "2026-11-29T02:30:00.000000000Z"


def test_the_pod_is_locked_down_and_gets_the_key_by_reference():
    s = spec()
    pod = render(s)["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == "servingbench-loadgen"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsUser"] == 10001
    key = [e for e in c["env"] if e["name"] == "SERVINGBENCH_ENGINE_API_KEY"]
    assert key == [{"name": "SERVINGBENCH_ENGINE_API_KEY", "valueFrom": {"secretKeyRef": {
        "name": s.secret_name, "key": "key"}}}]
    assert "not-a-real-key" not in str(render(s))
    assert "cpu" not in c["resources"]["limits"]  # a throttled client measures its own stalls


def test_placement_keeps_the_load_off_the_engine_nodes():
    pod = render(spec())["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"eks.amazonaws.com/nodegroup": "load-cpu"}
    assert pod["tolerations"] == [{"key": "servingbench/load", "operator": "Equal",
                                   "value": "true", "effect": "NoSchedule"}]
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    # the selector matches the engine's own pod labels
    assert all(engine_labels(VLLM_GPU)[k] == v for k, v in term["labelSelector"]["matchLabels"].items())
    assert term["labelSelector"]["matchLabels"] == ENGINE_LABELS
    bare = render(spec(node_selector=(), tolerations=(), service_account=None))["spec"]["template"]["spec"]
    assert "nodeSelector" not in bare and "tolerations" not in bare
    assert "serviceAccountName" not in bare


def test_the_engine_network_policy_admits_the_load_pods():
    pod_labels = render(spec())["spec"]["template"]["metadata"]["labels"]
    (rule,) = network_policy(VLLM_GPU)["spec"]["ingress"]
    (peer,) = rule["from"]
    assert all(pod_labels.get(k) == v for k, v in peer["podSelector"]["matchLabels"].items())


def test_names_are_dns_labels_unique_per_run():
    a, b = job_name(RUN), job_name(RUN[:-1] + "b")
    assert a != b and len(a) <= 52 and a == a.lower()
    assert len(f"{a}-9999") <= 63  # the pods' host names


@pytest.mark.parametrize("bad, match", [
    (dict(pods=0), "between 1 and 10000"),
    (dict(image="servingbench:latest"), "pinned by digest"),
    (dict(upload_uri="/tmp/runs/x"), "expected s3://"),
    (dict(tolerations=(("k", None, "Never"),)), "effect 'Never'"),
])
def test_bad_specs_are_refused_by_name(bad, match):
    with pytest.raises(ValueError, match=match):
        spec(**bad)


def test_the_job_and_its_secret_carry_what_the_reaper_proves_a_run_by():
    """Owner label, node-group label derived from the run id and the run-id annotation: an
    orphaned load Job and its key Secret are removed by the reaper like the engine's
    objects (resources/model_server/kube/reap.py)."""
    from servingbench.resources.contract.scope import nodegroup_name
    from servingbench.resources.model_server.kube.reap import KubeRunObjects

    reaper = KubeRunObjects(kube=None, owner="sb-test-install")
    asked = []

    def dead(group, run_id, created):
        asked.append((group, run_id))
        return group == nodegroup_name(run_id)

    s = spec()
    for obj in (render(s), api_key_secret(s, "not-a-real-key")):
        assert reaper._ours_and_dead(obj["metadata"], dead), obj["kind"]
    assert asked == [(nodegroup_name(RUN), RUN)] * 2
    assert not reaper._ours_and_dead(render(spec(owner="another-install"))["metadata"], dead)


def test_a_failed_pods_last_log_lines_are_redacted_before_the_manifest():
    from servingbench.resources.loadjob.job import outcomes

    key = "engine-key-0123456789abcdef"
    said = (f"Traceback ...\nrequests.exceptions.HTTPError: 401 for "
            f"http://admin:hunter2@10.0.0.7:8000/v1 with Authorization: Bearer {key}\n"
            "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY hf_AbCdEfGhIjKlMnOp")
    pod = {"metadata": {"name": "sb-load-x-0-abcde", "creationTimestamp": "2026-11-29T02:09:12Z",
                        "annotations": {"batch.kubernetes.io/job-completion-index": "0"}},
           "status": {"phase": "Failed", "containerStatuses": [{"name": "load", "state": {
               "terminated": {"exitCode": 1, "reason": "Error", "message": said}}}]}}
    (o,) = outcomes(1, [pod], None, (key,))
    reason = o.as_manifest()["reason"]
    assert "container load exited 1 (Error)" in reason and "[REDACTED]" in reason
    for secret in (key, "hunter2", "wJalrXUtnFEMI", "hf_AbCdEfGhIjKlMnOp"):
        assert secret not in reason, secret
