"""SERVINGBENCH_EKS_LOAD_*: the eks profile's load pods from the environment (read by
pipelines/profiles.py only); a bad value is a ConfigError naming the variable."""

from __future__ import annotations

import pytest
from servingbench.pipelines.config import ConfigError
from servingbench.pipelines.profiles import Settings, resources_for
from servingbench.resources.loadgen.generator import LoadGenerator
from servingbench.resources.loadjob.generator import KubeJobLoadGenerator

from tests.support.eks.specs import DIGEST

EKS = {"SERVINGBENCH_PROFILE": "eks", "SERVINGBENCH_EKS_CLUSTER": "bench",
       "SERVINGBENCH_EKS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1",
       "SERVINGBENCH_EKS_NODE_ROLE_ARN": "arn:aws:iam::123456789012:role/sb-nodes",
       "SERVINGBENCH_EKS_OWNER": "team-bench", "SERVINGBENCH_EKS_EXPOSE": "cluster_ip",
       "SERVINGBENCH_DATA_URI": "s3://sb-runs/nightly",
       "SERVINGBENCH_EKS_LOAD_PODS": "8",
       "SERVINGBENCH_EKS_LOAD_IMAGE": f"123456789012.dkr.ecr.us-east-1.amazonaws.com/servingbench@{DIGEST}",
       "SERVINGBENCH_EKS_LOAD_NODE_SELECTOR": "eks.amazonaws.com/nodegroup=load-cpu, role=load",
       "SERVINGBENCH_EKS_LOAD_TOLERATIONS": "servingbench/load=true:NoSchedule,spot:NoExecute"}


def build(monkeypatch, tmp_path, **over):
    for k in [k for k in __import__("os").environ if k.startswith("SERVINGBENCH_")]:
        monkeypatch.delenv(k)
    for k, v in (EKS | over).items():
        if v is None:
            monkeypatch.delenv(k, raising=False)
        else:
            monkeypatch.setenv(k, v)
    monkeypatch.setenv("SERVINGBENCH_DATA_DIR", str(tmp_path))
    return resources_for(Settings.from_env())


def test_load_pods_come_from_the_environment(monkeypatch, tmp_path):
    gen = build(monkeypatch, tmp_path)["load_generator"]
    assert isinstance(gen, KubeJobLoadGenerator)
    assert gen.pods == 8 and gen.data_uri == "s3://sb-runs/nightly" and gen.owner == "team-bench"
    assert gen.node_selector == (("eks.amazonaws.com/nodegroup", "load-cpu"), ("role", "load"))
    assert gen.tolerations == (("servingbench/load", "true", "NoSchedule"), ("spot", None, "NoExecute"))
    assert gen.service_account == "servingbench-loadgen" and ("AWS_REGION", "us-east-1") in gen.env


def test_without_load_pods_the_load_stays_in_the_run_process(monkeypatch, tmp_path):
    gen = build(monkeypatch, tmp_path, SERVINGBENCH_EKS_LOAD_PODS=None)["load_generator"]
    assert type(gen) is LoadGenerator


@pytest.mark.parametrize("over, match", [
    ({"SERVINGBENCH_EKS_LOAD_PODS": "many"}, "SERVINGBENCH_EKS_LOAD_PODS='many'"),
    ({"SERVINGBENCH_DATA_URI": None}, "needs SERVINGBENCH_DATA_URI"),
    ({"SERVINGBENCH_EKS_LOAD_IMAGE": None}, "needs SERVINGBENCH_EKS_LOAD_IMAGE"),
    ({"SERVINGBENCH_EKS_LOAD_IMAGE": "servingbench:latest"}, "pin it by digest"),
    ({"SERVINGBENCH_EKS_EXPOSE": "load_balancer", "SERVINGBENCH_EKS_SOURCE_RANGES": "10.0.0.0/8"},
     "SERVINGBENCH_EKS_EXPOSE=cluster_ip"),
    ({"SERVINGBENCH_EKS_LOAD_NODE_SELECTOR": "load-cpu"}, "NODE_SELECTOR: 'load-cpu'"),
    ({"SERVINGBENCH_EKS_LOAD_TOLERATIONS": "x=y:Sometimes"}, "TOLERATIONS: 'x=y:Sometimes'"),
])
def test_bad_settings_name_the_variable(monkeypatch, tmp_path, over, match):
    with pytest.raises(ConfigError, match=match.replace("[", r"\[")):
        build(monkeypatch, tmp_path, **over)
