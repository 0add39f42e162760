"""The eks profile loads in Dagster (no AWS call at load time) and names what it lacks."""

from __future__ import annotations

import dagster as dg
import pytest
from servingbench.pipelines import resources as dagster_resources
from servingbench.pipelines.config import ConfigError
from servingbench.pipelines.definitions import build_definitions
from servingbench.pipelines.profiles import Settings

ENV = {"SERVINGBENCH_EKS_CLUSTER": "bench", "SERVINGBENCH_EKS_REGION": "us-east-1",
       "SERVINGBENCH_EKS_NODE_ROLE_ARN": "arn:aws:iam::123456789012:role/sb-nodes",
       "SERVINGBENCH_EKS_OWNER": "team-bench",
       "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
       "AWS_DEFAULT_REGION": "us-east-1"}


def test_eks_profile_loads_with_real_resources_and_the_reaper_on(monkeypatch, tmp_path):
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SERVINGBENCH_EKS_EXPOSE", "cluster_ip")
    defs = build_definitions(Settings(profile="eks", data_dir=tmp_path))
    res = defs.resources
    # Dagster shows what a run used: each resource's config names the variables (EnvVar)
    for key in ("cluster", "model_server", "bill_source", "reaper"):
        assert isinstance(res[key], dg.ConfigurableResource), key
        assert isinstance(res[key].eks, dagster_resources.EksProfileResource), key
    profile = res["cluster"].eks
    assert profile.cluster == dg.EnvVar("SERVINGBENCH_EKS_CLUSTER")
    assert profile.expose == dg.EnvVar("SERVINGBENCH_EKS_EXPOSE")
    assert profile.subnets is None  # unset: the variable's default, no EnvVar to name
    # and hands the assets the plain objects of resources/, built from those values
    with dg.build_resources({k: res[k] for k in ("cluster", "model_server", "bill_source",
                                                 "reaper")}) as built:
        assert type(built.cluster).__name__ == "EksNodegroupCluster"
        assert type(built.model_server).__name__ == "KubeModelServer"
        assert built.model_server.expose["expose"] == "cluster_ip"
        assert type(built.bill_source).__name__ == "CostExplorerBill"
        assert type(built.reaper).__name__ == "EksReaper"
        assert not getattr(built.cluster, "emulated", False)     # its runs are `measured`
    sched = {s.name: s for s in defs.schedules}
    assert sched["reaper_schedule"].default_status.value == "RUNNING"
    assert {j.name for j in defs.resolve_all_job_defs()} >= {"benchmark_job", "reaper_job"}


def test_a_bad_eks_value_at_run_time_names_its_variable(monkeypatch):
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SERVINGBENCH_EKS_LOAD_PODS", "many")
    profile = dagster_resources.EksProfileResource(
        **{f: dg.EnvVar(n) for f, n in dagster_resources.EKS_FIELDS.items() if n in ENV
           or n == "SERVINGBENCH_EKS_LOAD_PODS"})
    cluster = dagster_resources.EksClusterResource(eks=profile)
    with pytest.raises(dg.DagsterResourceFunctionError) as exc, dg.build_resources({"c": cluster}):
        pass
    assert "SERVINGBENCH_EKS_LOAD_PODS='many'" in str(exc.value.__cause__)


def test_eks_profile_without_its_settings_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("SERVINGBENCH_EKS_CLUSTER", raising=False)
    with pytest.raises(ConfigError, match="SERVINGBENCH_EKS_CLUSTER"):
        build_definitions(Settings(profile="eks", data_dir=tmp_path))


def test_local_reaper_job_reaps_nothing(tmp_path):
    import dagster as dg

    defs = build_definitions(Settings(data_dir=tmp_path))
    result = defs.resolve_job_def("reaper_job").execute_in_process(
        instance=dg.DagsterInstance.ephemeral())
    assert result.success and result.output_for_node("reap_expired_nodegroups") == []
