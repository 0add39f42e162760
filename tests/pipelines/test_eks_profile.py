"""The eks profile loads in Dagster (no AWS call at load time) and names what it lacks."""

from __future__ import annotations

import pytest
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
    defs = build_definitions(Settings(profile="eks", data_dir=tmp_path))
    res = defs.resources
    assert type(res["cluster"]).__name__ == "EksNodegroupCluster"
    assert type(res["model_server"]).__name__ == "KubeModelServer"
    assert type(res["bill_source"]).__name__ == "CostExplorerBill"
    assert not getattr(res["cluster"], "emulated", False)     # its runs are `measured`
    sched = {s.name: s for s in defs.schedules}
    assert sched["reaper_schedule"].default_status.value == "RUNNING"
    assert {j.name for j in defs.resolve_all_job_defs()} >= {"benchmark_job", "reaper_job"}


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
