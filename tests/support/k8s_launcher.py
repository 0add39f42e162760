"""The Kubernetes run launcher without a cluster: its settings read from deploy/values.yaml
the way the Helm chart passes them, and a recording stand-in for the batch API (no local
Kubernetes API exists here) that keeps the Job the launcher would create."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
VALUES = REPO / "deploy" / "values.yaml"


class RecordingBatchApi:
    """Just `create_namespaced_job`: the one call K8sRunLauncher.launch_run makes."""

    def __init__(self):
        self.jobs: list[tuple[str, object]] = []

    def create_namespaced_job(self, body, namespace, **_):
        self.jobs.append((namespace, body))
        return body


def launcher_kwargs(values_path: Path = VALUES) -> dict:
    """K8sRunLauncher's arguments from the chart values' runLauncher section (the chart's
    configmap-instance template maps these keys one to one)."""
    values = yaml.safe_load(values_path.read_text())
    cfg = values["runLauncher"]["config"]["k8sRunLauncher"]
    run_cfg = cfg.get("runK8sConfig", {})
    snake = {"containerConfig": "container_config", "podSpecConfig": "pod_spec_config",
             "podTemplateSpecMetadata": "pod_template_spec_metadata",
             "jobSpecConfig": "job_spec_config", "jobMetadata": "job_metadata"}
    return {
        "service_account_name": values["global"]["serviceAccountName"],
        "instance_config_map": "servingbench-dagster-instance",
        "postgres_password_secret": "dagster-postgresql-secret",
        "dagster_home": "/opt/dagster/dagster_home",
        "job_namespace": cfg["jobNamespace"],
        "env_secrets": [s["name"] for s in cfg.get("envSecrets", [])],
        "run_k8s_config": {snake[k]: v for k, v in run_cfg.items()},
    }


def write_kubeconfig(path: Path) -> Path:
    """A kubeconfig the launcher loads at start; nothing ever connects to it."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "test", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}]}))
    return path
