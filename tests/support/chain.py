"""Helpers to run benchmark_job in-process for the pipeline tests."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from servingbench.pipelines.definitions import build_definitions
from servingbench.pipelines.profiles import Settings
from servingbench.resources.loadgen.generator import LoadGenerator

from tests.support.replay import RecordedBill, ReplayCluster, ReplayLoad, ReplayModelServer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DATE = "2026-11-29"
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


def key(candidate: str, date: str = DATE) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({"date": date, "candidate": candidate})


def replay_resources(fixture: str) -> dict:
    rec = FIXTURES / fixture
    return {"cluster": ReplayCluster(rec), "model_server": ReplayModelServer(rec),
            "load_generator": ReplayLoad(rec), "bill_source": RecordedBill(rec)}


def run_job(data_dir: Path, job: str = "benchmark_job", candidate: str = "p5-scout-bf16-tp8",
            resources: dict | None = None, settings: Settings | None = None, instance=None):
    settings = settings or Settings(data_dir=data_dir, load=LoadGenerator())
    defs = build_definitions(settings, resources=resources)
    return defs.resolve_job_def(job).execute_in_process(
        partition_key=key(candidate), instance=instance or dg.DagsterInstance.ephemeral(),
        raise_on_error=False, run_config=QUIET), defs


def materialized(result) -> dict[str, dict]:
    """asset key -> its materialization metadata (as plain values)."""
    out = {}
    for event in result.all_events:
        if event.is_step_materialization:
            md = event.event_specific_data.materialization.metadata
            out[event.asset_key.to_user_string()] = {k: v.value for k, v in md.items()}
    return out


def checks(result) -> dict[str, bool]:
    return {e.event_specific_data.check_name: e.event_specific_data.passed
            for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}
