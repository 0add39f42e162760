"""The eks profile honours a candidate's `replicas` / `autoscaling` or refuses it, naming the
key, before anything is created: a key the KEDA / HPA manifests would drop or change silently
(the HPA has no activation threshold and never scales to zero; behavior windows are whole
seconds), or one that would fail only at deploy once the node group is up."""

from __future__ import annotations

import dagster as dg
import pytest
from servingbench.assets import cluster as cluster_link
from servingbench.resources.contract.deployment import Replicated
from servingbench.resources.model_server.kube.autoscale import unwired
from servingbench.resources.model_server.kube.server import KubeModelServer

from tests.support.eks.aws import OWNER, REGION, ROLE

KEDA = {"policy": "keda", "metric": "requests_waiting", "target": 4.0, "activation_target": 1.0,
        "scale_up_cooldown_s": 0.0, "scale_down_cooldown_s": 300.0}
HPA = {**KEDA, "policy": "hpa", "activation_target": 0.0}
ENV = {"SERVINGBENCH_EKS_CLUSTER": "bench", "SERVINGBENCH_EKS_REGION": REGION,
       "SERVINGBENCH_EKS_NODE_ROLE_ARN": ROLE, "SERVINGBENCH_EKS_OWNER": OWNER,
       "SERVINGBENCH_EKS_SOURCE_RANGES": "10.0.0.0/16", "SERVINGBENCH_PROFILE": "eks"}


def plan(replicas=None, autoscaling=None) -> Replicated:
    return Replicated.of(replicas, autoscaling)


def test_what_the_manifests_render_is_accepted():
    assert unwired("vllm", plan({"min": 1, "max": 4, "initial": 1})) is None
    assert unwired("vllm", plan({"min": 0, "max": 4, "initial": 1}, KEDA)) is None
    assert unwired("vllm", plan({"min": 0, "max": 2, "initial": 0},
                                {**KEDA, "metric": "rps"})) is None
    assert unwired("vllm", plan({"min": 1, "max": 4, "initial": 1}, HPA)) is None


@pytest.mark.parametrize("replicas, autoscaling, key", [
    ({"min": 1, "max": 2, "initial": 1}, {**HPA, "activation_target": 1.0},
     "autoscaling.activation_target: policy hpa"),
    ({"min": 0, "max": 2, "initial": 1}, HPA, "replicas.min: 0 needs policy keda"),
    ({"min": 1, "max": 2, "initial": 1}, {**HPA, "metric": "rps"}, "autoscaling.metric: rps"),
    ({"min": 1, "max": 2, "initial": 1}, {**KEDA, "scale_down_cooldown_s": 2.5},
     "autoscaling.scale_down_cooldown_s: 2.5 s"),
    ({"min": 1, "max": 2, "initial": 1}, {**KEDA, "policy": "local"},
     "autoscaling.policy: 'local' does not run on eks"),
])
def test_a_key_the_manifests_would_not_carry_is_named(replicas, autoscaling, key):
    why = unwired("vllm", plan(replicas, autoscaling))
    assert why is not None and why.startswith(key), why


def test_a_metric_the_engine_does_not_serve_is_named():
    # SGLang serves no finished-requests counter: KEDA's rps query would read nothing
    assert unwired("sglang", plan(None, {**KEDA, "metric": "rps"})).startswith(
        "autoscaling.metric: engine sglang has no finished-requests counter")
    assert unwired("sglang", plan(None, {**KEDA, "metric": "kv_cache_usage"})) is None


def _file(tmp_path, autoscaling: str) -> str:
    path = tmp_path / "cands.yaml"
    path.write_text(f"""
candidates:
  - name: p5-burst
    instance_type: p5.48xlarge
    model: meta-llama/Llama-4-Scout-17B-16E-Instruct
    precision: bf16
    tensor_parallel: 8
    engine: vllm
    replicas: {{min: 1, max: 2, initial: 1}}
    autoscaling: {autoscaling}
""")
    return str(path)


def test_servingbench_run_on_eks_exits_2_naming_the_key(tmp_path, monkeypatch, capsys):
    from servingbench.pipelines.cli import main as cli

    cands = _file(tmp_path, "{policy: hpa, metric: requests_waiting, target: 4, "
                            "activation_target: 2}")
    for k, v in {**ENV, "SERVINGBENCH_CANDIDATES": cands, "DAGSTER_HOME": str(tmp_path),
                 "SERVINGBENCH_DATA_DIR": str(tmp_path / "data")}.items():
        monkeypatch.setenv(k, v)
    assert cli(["run", "--candidate", "p5-burst"]) == 2
    err = capsys.readouterr().err
    assert "candidate p5-burst: autoscaling.activation_target" in err and cands in err
    assert "Traceback" not in err
    assert not (tmp_path / "data" / "runs").exists()  # nothing was started


def test_the_chain_asks_the_model_server_before_anything_is_made(tmp_path):
    # the asset's pre-flight asks the eks model server (a run from the UI or a schedule),
    # before a run folder or a node group exists
    from servingbench.pipelines.catalog import load_candidates

    [cand] = load_candidates(_file(tmp_path, "{policy: local, metric: rps, target: 2}"))
    server = KubeModelServer(lambda: pytest.fail("a Kubernetes client was asked for"))
    with pytest.raises(dg.Failure, match="candidate p5-burst: autoscaling.policy: 'local'"):
        cluster_link.preflight(cand, server)
