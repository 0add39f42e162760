"""Quota-aware concurrency: candidates that share a pool (an instance family's quota or a
capacity reservation) never hold nodes at the same time, while other pools run beside them.

The mechanism is Dagster's own run queue: every benchmark run carries its candidate's pool
as a run tag (`servingbench/pool`), and the instance's queued run coordinator holds a run in
the queue while its pool's limit of runs is in progress (`concurrency.runs.
tag_concurrency_limits` in dagster.yaml, `dagsterDaemon.runCoordinator` in the Helm values).
Both are written from the candidates file's `pools`, which stays the one place a limit is
set. Dagster's concurrency pools would not do: a pool is attached to an op definition, and
one op serves every candidate partition, so one op cannot sit in the p5 pool for one
partition and in the g6e pool for another; a run tag is set per partition.

The pool holds for the whole run (queued → dequeued → finished); `pool_slot` records in the
run folder's pool.json when the run was queued, when its nodes were asked for and when they
were given back, so a run's place in the queue is data.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import dagster as dg
import yaml
from servingbench.resources.contract.timestamps import format_ts

POOL_TAG = "servingbench/pool"


def pool_tags(pool: str | None) -> dict[str, str]:
    """The run tags that put a run in `pool` (none without a pool)."""
    return {POOL_TAG: pool} if pool else {}


def tag_limits(candidates: Iterable) -> list[dict]:
    """The run queue's tag concurrency limits: one per pool the candidates use, its limit
    from the candidates file."""
    limits = sorted({(c.pool, c.pool_limit) for c in candidates if c.pool})
    return [{"key": POOL_TAG, "value": pool, "limit": int(limit)} for pool, limit in limits]


def instance_config(doc: dict | None, candidates: Iterable) -> dict:
    """A dagster.yaml document with the pools' limits in `concurrency.runs`, the rest of
    `doc` kept (other tags' limits too; a pool's entry is replaced, never doubled)."""
    doc = dict(doc or {})
    concurrency = dict(doc.get("concurrency") or {})
    runs = dict(concurrency.get("runs") or {})
    others = [lim for lim in runs.get("tag_concurrency_limits") or []
              if lim.get("key") != POOL_TAG]
    runs["tag_concurrency_limits"] = others + tag_limits(candidates)
    concurrency["runs"] = runs
    doc["concurrency"] = concurrency
    return doc


def write_instance_config(home: Path, candidates: Iterable) -> Path:
    """Put the pools' limits into `home`/dagster.yaml (written only on change)."""
    path = Path(home) / "dagster.yaml"
    old = yaml.safe_load(path.read_text()) if path.exists() else None
    new = instance_config(old, list(candidates))
    if new != old:
        path.write_text(yaml.safe_dump(new, sort_keys=False))
    return path


def helm_run_coordinator(candidates: Iterable, max_concurrent_runs: int) -> dict:
    """deploy/values.yaml's `dagsterDaemon.runCoordinator` for these candidates' pools."""
    return {"enabled": True, "type": "QueuedRunCoordinator", "config": {"queuedRunCoordinator": {
        "maxConcurrentRuns": max_concurrent_runs,
        "tagConcurrencyLimits": tag_limits(candidates)}}}


def _record(path: Path | None, facts: dict) -> None:
    if path is not None:
        path.write_text(json.dumps({k: format_ts(v) if k.endswith("_at") and v else v
                                    for k, v in facts.items()}, indent=2) + "\n")


@contextlib.contextmanager
def pool_slot(context, pool: str | None, limit: int | None,
              record: Path | None = None) -> Iterator[dict]:
    """Hold the body in `pool`: the run queue already made the run wait for its pool before
    it started; this records the wait and the nodes' interval in `record` (pool.json).
    `queued` says whether the queue did enforce it: a run executed in-process (`servingbench
    run --candidate`, the demo, the tests) never passed through it, and says so in its log."""
    run = context.run
    queued = bool(pool) and run.tags.get(POOL_TAG) == pool and _was_queued(context)
    created = _created_ns(context)
    facts = {"pool": pool, "limit": limit, "queued": queued,
             "requested_at": created or time.time_ns(), "acquired_at": time.time_ns(),
             "released_at": None}
    if pool and not queued:
        context.log.info(f"pool {pool!r} (limit {limit}) not enforced: this run did not pass "
                            "through the instance's run queue with its pool tag (runs launched "
                            "by `servingbench run --all`, the UI or the schedule do)")
    elif pool:
        context.log.info(f"in pool {pool!r} (limit {limit}) since the run queue started it")
    try:
        yield facts
    finally:
        facts["released_at"] = time.time_ns()
        _record(record, facts)


def _was_queued(context) -> bool:
    records = context.instance.get_records_for_run(
        context.run_id, of_type=dg.DagsterEventType.RUN_ENQUEUED, limit=1).records
    return bool(records)


def _created_ns(context) -> int | None:
    rec = context.instance.get_run_record_by_id(context.run_id)
    return int(rec.create_timestamp.timestamp() * 1e9) if rec and rec.create_timestamp else None


def partition_pool_tags(partitions_def, pools: dict[str, str]) -> dg.PartitionedConfig:
    """benchmark_job's config: each date × candidate run carries its candidate's pool tag,
    however it is started (the UI, the schedule, a backfill, `servingbench run`)."""
    def tags(key: str) -> dict[str, str]:
        candidate = partitions_def.get_partition_key_from_str(key).keys_by_dimension["candidate"]
        return pool_tags(pools.get(candidate))

    return dg.PartitionedConfig(partitions_def, run_config_for_partition_key_fn=lambda _: {},
                                tags_for_partition_key_fn=tags)

