"""Every job carries a run-level maximum runtime (`dagster/max_runtime`), which Dagster's
run monitoring (on in deploy/values.yaml) enforces by terminating the run: a run that
hangs past it stops heartbeating, and the reaper tears its node group down."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import yaml
from dagster._core.storage.tags import MAX_RUNTIME_SECONDS_TAG
from servingbench.pipelines.definitions import build_definitions
from servingbench.pipelines.profiles import Settings

REPO = Path(__file__).resolve().parents[2]




def test_every_job_and_every_run_of_it_carries_a_max_runtime(tmp_path):
    assert MAX_RUNTIME_SECONDS_TAG == "dagster/max_runtime"  # the tag the monitor reads
    defs = build_definitions(Settings(data_dir=tmp_path))
    jobs = [j for j in defs.resolve_all_job_defs() if not j.name.startswith("__")]
    assert {j.name for j in jobs} >= {"benchmark_job", "bill_refresh_job", "peer_import_job",
                                      "reaper_job"}
    for job in jobs:
        limit = float(job.tags[MAX_RUNTIME_SECONDS_TAG])
        assert 0 < limit <= 24 * 3600, job.name
    # and a run launched from a job carries it, where the run monitor looks
    instance = dg.DagsterInstance.ephemeral()
    result = defs.resolve_job_def("peer_import_job").execute_in_process(
        run_config={"ops": {"import_peer_results": {"config": {
            "peer": "vllm", "source": str(tmp_path / "absent")}}}},
        instance=instance, raise_on_error=False)
    tags = instance.get_run_by_id(result.run_id).tags
    assert tags[MAX_RUNTIME_SECONDS_TAG] == "3600"


def test_the_deployment_turns_run_monitoring_on():
    values = yaml.safe_load((REPO / "deploy" / "values.yaml").read_text())
    assert values["dagsterDaemon"]["runMonitoring"]["enabled"] is True
