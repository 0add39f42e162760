"""Every job carries a run-level maximum runtime (`dagster/max_runtime`), which Dagster's
run monitoring (on in deploy/values.yaml) enforces by terminating the run: a run that
hangs past it stops heartbeating, and the reaper tears its node group down."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
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


@pytest.mark.parametrize("job_name", ["benchmark_job", "reaper_job"])
def test_dagsters_run_monitor_stops_a_run_past_its_tag(tmp_path, monkeypatch, job_name):
    """The monitor's own check (what the daemon runs each tick) against a real instance: a
    started run is left alone inside its limit and failed past it."""
    import logging

    from dagster._core.events import DagsterEvent, DagsterEventType
    from dagster._daemon.monitoring import run_monitoring

    job = build_definitions(Settings(data_dir=tmp_path)).resolve_job_def(job_name)
    limit = float(job.tags[MAX_RUNTIME_SECONDS_TAG])
    instance = dg.DagsterInstance.ephemeral()
    run = instance.create_run_for_job(job_def=job, tags=dict(job.tags))  # as a launch does
    instance.report_dagster_event(DagsterEvent(event_type_value=DagsterEventType.RUN_START.value,
                                               job_name=job.name), run.run_id)
    real_now = run_monitoring.get_current_timestamp

    def check_at(elapsed_s: float) -> dg.DagsterRunStatus:
        monkeypatch.setattr(run_monitoring, "get_current_timestamp",
                            lambda: real_now() + elapsed_s)
        # no instance-wide default (0): the job's tag alone is what stops it
        run_monitoring.check_run_timeout(instance, instance.get_run_record_by_id(run.run_id),
                                         logging.getLogger("monitor"), 0)
        return instance.get_run_by_id(run.run_id).status

    assert check_at(limit - 60) == dg.DagsterRunStatus.STARTED
    assert check_at(limit + 60) == dg.DagsterRunStatus.FAILURE
