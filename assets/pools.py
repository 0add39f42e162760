"""Quota-aware concurrency: a benchmark holds one slot of its candidate's Dagster concurrency
pool from before provisioning until after teardown.

Dagster attaches a pool to an op definition, and one op serves every candidate partition, so
the step claims its candidate's pool itself, through the same instance storage (and the same
slots, visible under Deployment → Concurrency) that Dagster's executor uses for `pool=`. The
pool's limit comes from pipelines/candidates.yaml, which stays the one place it is set: the
slot count is brought in line before each claim.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
from servingbench.resources.contract.timestamps import format_ts

# A run in one of these holds nothing any more (Dagster's own set, from its public API).
FINISHED_STATUSES = frozenset({dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE,
                               dg.DagsterRunStatus.CANCELED})
POLL_S = 1.0
MAX_WAIT_S = 12 * 3600.0  # a night: a run still queued after that is failed, never left hanging


@contextlib.contextmanager
def _one_writer(instance) -> Iterator[None]:
    """One process at a time sets slot counts on an on-disk (SQLite) instance: runs started
    together (`run --all --parallel`) each bring their pool's count in line at once, and
    Dagster's SQLite storage does not serialize that. Seen: two slots made for a pool of
    limit 1 (both runs held it together), and a run failing on the limit row's unique
    constraint. A file lock in the instance's folder serializes them; an instance without
    one (Postgres, in the cluster) locks the limit row itself."""
    root = getattr(instance, "root_directory", None)
    if not root or not os.path.isdir(root):
        yield
        return
    with open(os.path.join(root, ".servingbench-pools.lock"), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def sync_limit(instance, pool: str, limit: int) -> None:
    """Set `pool`'s slot count to `limit` unless it already is (writes only on change)."""
    storage = instance.event_log_storage
    if storage.get_concurrency_info(pool).slot_count == limit:
        return
    with _one_writer(instance):
        if storage.get_concurrency_info(pool).slot_count != limit:  # another may have, meanwhile
            storage.set_concurrency_slots(pool, limit)


def free_finished(instance, pool: str) -> list[str]:
    """Free slots still held by runs that have ended (a killed process cannot free its own);
    the daemon's run monitoring does the same when it runs (deploy/values.yaml)."""
    storage = instance.event_log_storage
    held = {slot.run_id for slot in storage.get_concurrency_info(pool).claimed_slots}
    freed = []
    for run_id in held:
        run = instance.get_run_by_id(run_id)
        if run is None or run.status in FINISHED_STATUSES:
            storage.free_concurrency_slots_for_run(run_id)
            freed.append(run_id)
    return freed


def _record(path: Path | None, facts: dict) -> None:
    if path is not None:
        path.write_text(json.dumps({k: format_ts(v) if k.endswith("_at") and v else v
                                    for k, v in facts.items()}, indent=2) + "\n")


def _enforced(context, pool: str) -> bool:
    """Whether this Dagster instance can hold pool slots; an in-memory one (tests, one
    process) cannot share them with anyone, and says so."""
    if context.instance.event_log_storage.supports_global_concurrency_limits:
        return True
    context.log.warning(f"pool {pool!r} not enforced: this Dagster instance's storage has "
                        "no concurrency pools (`dagster instance migrate` adds them)")
    return False


@contextlib.contextmanager
def pool_slot(context, pool: str | None, limit: int | None, record: Path | None = None,
              max_wait_s: float = MAX_WAIT_S, clock=time.monotonic,
              sleep=time.sleep) -> Iterator[dict]:
    """Hold one slot of `pool` for the body. `record` (the run folder's pool.json) gets when
    the slot was asked for, held and given back, so a run's place in the queue is data. A
    candidate without a pool runs at once."""
    facts = {"pool": pool, "limit": limit, "requested_at": time.time_ns(),
             "acquired_at": None, "released_at": None}
    if pool is None or not _enforced(context, pool):
        # at once: no pool, or one this instance cannot share with anyone
        facts["acquired_at"] = facts["requested_at"] if pool is None else time.time_ns()
        try:
            yield facts
        finally:
            facts["released_at"] = time.time_ns()
            _record(record, facts)
        return
    instance, run_id, step = context.instance, context.run_id, str(context.op_handle)
    storage = instance.event_log_storage
    sync_limit(instance, pool, limit)
    free_finished(instance, pool)
    deadline, logged = clock() + max_wait_s, False
    try:
        while not storage.claim_concurrency_slot(pool, run_id, step).is_claimed:
            if not logged:
                holders = sorted(storage.get_concurrency_info(pool).active_run_ids)
                context.log.info(f"waiting for a slot of pool {pool!r} (limit {limit}); "
                                 f"held by run(s) {', '.join(holders) or '-'}")
                logged = True
            if clock() > deadline:
                raise dg.Failure(description=f"no slot of pool {pool!r} (limit {limit}) "
                                             f"within {max_wait_s:.0f} s")
            sleep(POLL_S)
        facts["acquired_at"] = time.time_ns()
        context.log.info(f"holding a slot of pool {pool!r} (limit {limit})")
        yield facts
    finally:
        # stamped before the slot is freed, so the next holder's interval starts after it
        facts["released_at"] = time.time_ns() if facts["acquired_at"] else None
        _record(record, facts)
        # frees the slot, or the pending claim if we never got one
        storage.free_concurrency_slot_for_step(run_id, step)
