"""Jobs and nightly schedules."""

from __future__ import annotations

import datetime as dt
import json

import dagster as dg
from servingbench.assets.peer_import import peer_import_job
from servingbench.assets.pools import partition_pool_tags
from servingbench.assets.report import publish_unfinished_run
from servingbench.pipelines.config import BENCHMARK_MAX_RUNTIME_S
from servingbench.pipelines.liveness import dagster_alive
from servingbench.resources.analysis.gates import RULE_OF
from servingbench.resources.contract import run_files

CHAIN = ["provisioned_cluster", "deployed_model", "warmup_log", "steady_state_request_log",
         "quality", "cost_explorer_bill", "derived_metrics", "cost_per_1m_output_tokens", "benchmark_report"]
BILL_PART = ["cost_explorer_bill", "derived_metrics", "cost_per_1m_output_tokens", "benchmark_report"]
REFRESH_DAYS = 14
# What a benchmark run's pod asks for when the Kubernetes run launcher starts it
# (deploy/values.yaml): the load generator needs a core of its own to measure honestly.
BENCHMARK_POD = {"container_config": {"resources": {"requests": {"cpu": "2", "memory": "4Gi"},
                                                    "limits": {"memory": "8Gi"}}}}
# The longest each job may run: Dagster's run monitoring (on in deploy/values.yaml) stops a
# run past its `dagster/max_runtime` tag, so a run that hangs anyway (a read that never
# ends, a stuck rollout) stops heartbeating and the reaper tears its node group down.
# A benchmark is provisioning, rollout, warm-up, the load steps and the quality set.
MAX_RUNTIME_S = {"benchmark_job": BENCHMARK_MAX_RUNTIME_S, "bill_refresh_job": 3600, "reaper_job": 1800}


def max_runtime(job: str) -> dict[str, str]:
    return {"dagster/max_runtime": str(MAX_RUNTIME_S[job])}


def jobs(partitions_def, pools: dict[str, str] | None = None) -> list:
    """`pools`: candidate -> its concurrency pool, carried by each benchmark run as a tag."""
    return [reaper_job, peer_import_job,
        dg.define_asset_job("benchmark_job", selection=dg.AssetSelection.assets(*CHAIN),
                            partitions_def=partitions_def, executor_def=dg.in_process_executor,
                            config=partition_pool_tags(partitions_def, pools or {}),
                            tags={"dagster-k8s/config": BENCHMARK_POD,
                                  **max_runtime("benchmark_job")},
                            hooks={publish_unfinished_run},
                            description="The whole chain for one date × candidate partition."),
        dg.define_asset_job("bill_refresh_job", selection=dg.AssetSelection.assets(*BILL_PART),
                            partitions_def=partitions_def, executor_def=dg.in_process_executor,
                            tags=max_runtime("bill_refresh_job"),
                            description="Refetch the bill of a run whose cost is still "
                                        "provisional (or whose bill did not yet cover it)."),
    ]


@dg.op(required_resource_keys={"reaper"})
def reap_expired_nodegroups(context) -> list:
    reaped = context.resources.reaper.reap(alive=dagster_alive(context.instance))
    context.log.info(f"reaped {len(reaped)} node group(s): {', '.join(reaped) or '-'}")
    return reaped


@dg.job(name="reaper_job", executor_def=dg.in_process_executor, tags=max_runtime("reaper_job"),
        description="Delete this installation's expired node groups, launch templates and "
                    "the Kubernetes objects of runs that are over (eks profile).")
def reaper_job():
    reap_expired_nodegroups()


def _key(date: str, candidate: str) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({"date": date, "candidate": candidate})


def partitions_to_refresh(storage, days: int = REFRESH_DAYS, now: dt.datetime | None = None) -> list[str]:
    """Partition keys of recent runs to refetch: cost still provisional, or rejected by the
    bill's scope rule only (usage that had not appeared in Cost Explorer yet)."""
    now = now or dt.datetime.now(dt.UTC)
    keys = []
    for part_file in sorted(storage.runs_dir.glob("*/partition.json")):
        run_dir = part_file.parent
        info = json.loads(part_file.read_text())
        if dt.datetime.fromisoformat(info["created_at"]) < now - dt.timedelta(days=days):
            continue
        gates = run_files.read_gates(run_dir)
        if gates is None:
            continue
        failed = [g["rule"] for g in gates if g["passed"] is False]
        cost_file = run_dir / "cost_per_1m.parquet"
        provisional = False
        if cost_file.exists():
            import pyarrow.parquet as pq
            provisional = "provisional" in pq.read_table(cost_file, columns=["bill_status"])[
                "bill_status"].to_pylist()
        # A bill fetched before its usage appeared fails the scope rule alone: fetch it again.
        if provisional or failed == [RULE_OF["scoped"]]:
            keys.append(info["partition"])
    return sorted(set(keys))


def schedules(candidate_names: list[str], profile: str = "local") -> list:
    # the eks profile is a deployment (deploy/values.yaml): its nightly runs are on from the
    # start; locally nothing runs unless someone turns it on in the UI
    nightly = (dg.DefaultScheduleStatus.RUNNING if profile == "eks"
               else dg.DefaultScheduleStatus.STOPPED)

    @dg.schedule(job_name="benchmark_job", cron_schedule="0 2 * * *", execution_timezone="UTC",
                 name="benchmark_schedule", default_status=nightly,
                 description="Every night: benchmark every candidate for the day's partition.")
    def benchmark_schedule(context):
        date = context.scheduled_execution_time.strftime("%Y-%m-%d")
        for name in candidate_names:
            key = _key(date, name)
            yield dg.RunRequest(run_key=f"{key}", partition_key=key)

    @dg.schedule(job_name="bill_refresh_job", cron_schedule="0 6 * * *", execution_timezone="UTC",
                 name="bill_refresh_schedule", default_status=nightly,
                 required_resource_keys={"storage"},
                 description="Every morning: refetch bills until every recent cost is final.")
    def bill_refresh_schedule(context):
        stamp = context.scheduled_execution_time.strftime("%Y%m%d")
        keys = partitions_to_refresh(context.resources.storage)
        if not keys:
            yield dg.SkipReason("every recent run's cost is final")
        for key in keys:
            yield dg.RunRequest(run_key=f"{key}@{stamp}", partition_key=key)

    reaper_schedule = dg.ScheduleDefinition(
        name="reaper_schedule", job=reaper_job, cron_schedule="15 * * * *",
        execution_timezone="UTC",
        description="Every hour: delete expired servingbench node groups (on by default for eks).",
        default_status=nightly)
    return [benchmark_schedule, bill_refresh_schedule, reaper_schedule]
