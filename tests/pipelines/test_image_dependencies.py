"""The image installs what the deployed instance loads: the Helm values keep Dagster's runs,
schedules and run queue in PostgreSQL, launch runs as Kubernetes pods and publish to S3, so
dagster-postgres, dagster-k8s and dagster-aws are main dependencies in the lock the
Dockerfile installs without the dev group."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _main_dependencies() -> set[str]:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    (project,) = [p for p in lock["package"] if p["name"] == "servingbench"]
    return {d["name"] for d in project["dependencies"]}


def test_the_deployed_instances_libraries_are_main_dependencies():
    values = yaml.safe_load((ROOT / "deploy/values.yaml").read_text())
    needed = {"dagster-aws"}
    if values.get("postgresql"):
        needed.add("dagster-postgres")
    if "K8s" in str(values.get("runLauncher", {}).get("type", "")):
        needed.add("dagster-k8s")
    assert needed >= {"dagster-postgres", "dagster-k8s"}  # what the values say today
    assert needed <= _main_dependencies(), needed - _main_dependencies()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert {d.split("==")[0] for d in project["dependencies"]} >= needed


def test_the_image_installs_the_lock_without_the_dev_group():
    syncs = [line for line in (ROOT / "Dockerfile").read_text().splitlines()
             if line.startswith("RUN uv sync")]
    assert syncs and all("--frozen" in s and "--no-dev" in s for s in syncs)
