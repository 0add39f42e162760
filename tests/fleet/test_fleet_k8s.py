"""Dagster on Kubernetes without a cluster: the definitions load in an instance whose run
launcher is dagster-k8s's K8sRunLauncher (configured from deploy/values.yaml), and the Job it
would create for a benchmark run is a valid Kubernetes object."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import kubernetes_validate
import pytest
import yaml

from tests.support.k8s_launcher import VALUES, RecordingBatchApi, launcher_kwargs, write_kubeconfig

pytestmark = pytest.mark.slow  # a chain, a job or processes: not in `make check`

REPO = Path(__file__).resolve().parents[2]
EKS_ENV = {"SERVINGBENCH_PROFILE": "eks", "SERVINGBENCH_EKS_CLUSTER": "bench",
           "SERVINGBENCH_EKS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1",
           "SERVINGBENCH_EKS_NODE_ROLE_ARN": "arn:aws:iam::123456789012:role/sb-nodes",
           "SERVINGBENCH_EKS_OWNER": "team-bench"}


@pytest.fixture
def eks_env(monkeypatch, tmp_path):
    for k, v in EKS_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SERVINGBENCH_DATA_DIR", str(tmp_path / "data"))


def _launch_benchmark_run(tmp_path):
    from dagster._core.launcher import LaunchRunContext
    from dagster._core.test_utils import create_run_for_test, in_process_test_workspace
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
    from dagster_k8s import K8sRunLauncher

    batch = RecordingBatchApi()
    launcher = K8sRunLauncher(load_incluster_config=False,
                              kubeconfig_file=str(write_kubeconfig(tmp_path / "kubeconfig")),
                              k8s_client_batch_api=batch, **launcher_kwargs())
    origin = LoadableTargetOrigin(module_name="servingbench.pipelines.definitions",
                                  working_directory=str(REPO))
    with dg.instance_for_test() as instance:
        launcher.register_instance(instance)
        with in_process_test_workspace(instance, origin,
                                       container_image="servingbench:test") as workspace:
            location = workspace.get_code_location(workspace.code_location_names[0])
            repo = next(iter(location.get_repositories().values()))
            remote = repo.get_full_job("benchmark_job")
            key = dg.MultiPartitionKey({"date": "2026-11-29", "candidate": "p5-scout-bf16-tp8"})
            tags = {**remote.tags, "dagster/partition": str(key)}
            run = create_run_for_test(instance, job_name="benchmark_job", tags=tags,
                                      remote_job_origin=remote.get_remote_origin(),
                                      job_code_origin=remote.get_python_origin())
            launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=workspace))
            schedules = {s.name: s.default_status for s in repo.get_schedules()}
    return batch, launcher, schedules


def test_the_launcher_would_create_a_valid_job_for_a_benchmark_run(eks_env, tmp_path):
    from kubernetes import client

    batch, launcher, schedules = _launch_benchmark_run(tmp_path)
    ((namespace, body),) = batch.jobs
    job = client.ApiClient().sanitize_for_serialization(body)
    kubernetes_validate.validate(job, "1.33", strict=True)
    assert namespace == "dagster" and job["kind"] == "Job"  # apart from the engines' namespace
    spec = job["spec"]
    assert spec["backoffLimit"] == 0 and spec["ttlSecondsAfterFinished"] == 86400
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "servingbench-dagster"
    (container,) = pod["containers"]
    assert container["image"] == "servingbench:test"
    assert container["args"][:3] == ["dagster", "api", "execute_run"]
    # the benchmark job's own tag wins over the launcher's default for the run pod
    assert container["resources"]["requests"] == {"cpu": "2", "memory": "4Gi"}
    assert container["securityContext"]["runAsNonRoot"] is True
    assert {"secretRef": {"name": "servingbench-env"}} in container["envFrom"]
    assert job["metadata"]["labels"]["dagster/job"] == "benchmark_job"
    # the run pod is the swap driver's: the one source a swapped model's NetworkPolicy admits
    from servingbench.resources.contract import settings
    from servingbench.resources.model_server.kube.render import SWAP_DRIVER_LABELS

    assert SWAP_DRIVER_LABELS.items() <= spec["template"]["metadata"]["labels"].items()
    assert namespace == settings.default("SERVINGBENCH_EKS_RUN_NAMESPACE")
    # the eks deployment's nightly schedules are on from the start
    assert {k: v.value for k, v in schedules.items()} == {
        "benchmark_schedule": "RUNNING", "bill_refresh_schedule": "RUNNING",
        "reaper_schedule": "RUNNING"}


def test_the_definitions_keep_one_pod_per_run(eks_env, tmp_path):
    """Every job executes in-process: the run pod holds the node group and the load
    generator from provision to teardown, so no step may move to another pod."""
    from servingbench.pipelines.definitions import build_definitions
    from servingbench.pipelines.profiles import Settings

    defs = build_definitions(Settings.from_env())
    for job in defs.resolve_all_job_defs():
        if not job.name.startswith("__"):
            assert job.executor_def.name == "in_process", job.name


def test_the_helm_values_name_the_parts_docs_deploy_relies_on():
    values = yaml.safe_load(VALUES.read_text())
    (dep,) = values["dagster-user-deployments"]["deployments"]
    assert dep["dagsterApiGrpcArgs"] == ["-m", "servingbench.pipelines.definitions"]
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    assert values["dagsterDaemon"]["runMonitoring"]["enabled"] is True  # a dead pod ends its run, and its hold on its pool
    assert values["postgresql"]["postgresqlHost"]
    docker = (REPO / "Dockerfile").read_text()
    assert "@sha256:" in docker.split("FROM", 1)[1].splitlines()[0]
    assert "uv sync --frozen" in docker and "USER 10001" in docker
