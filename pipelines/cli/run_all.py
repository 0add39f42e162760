"""`servingbench run --all`: every candidate as its own Dagster run, at most N at once, through
the instance's run queue (DAGSTER_HOME).

The pools' limits go into the instance's dagster.yaml (`concurrency.runs.
tag_concurrency_limits`, assets/pools.py) and each run carries its pool as a run tag, so the
queued run coordinator is what keeps two runs of one pool apart, exactly as it does on the
cluster. A Dagster daemon (started here, stopped at the end) dequeues the runs and launches
each in a process of its own, like the Kubernetes run launcher's pod per run: a run that
crashes takes nobody else with it.

Runs are submitted from this process, as `dagster job launch` submits one (the same calls of
the pinned Dagster), through one workspace opened for each batch of submissions: its code
server (a process Dagster starts and ends) loads the definitions once for the batch, where a
`dagster job launch` per run started a CLI and a code server of its own for each (~4
CPU-seconds and 12 s apiece on a busy 2-core machine, before any run could be dequeued). The
workspace is open only while it submits, so a kill -9 of this command leaves no code server
behind for longer than Dagster's heartbeat gives one.
"""

from __future__ import annotations

import contextlib
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
from servingbench.assets.pools import pool_tags, write_instance_config
from servingbench.pipelines.config import REPO
from servingbench.resources.model_server.child import ChildProcess

POLL_S = 1.0
BATCH_TAG = "servingbench/run_all"
WORKSPACE = REPO / "workspace.yaml"
FINISHED = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE,
            dg.DagsterRunStatus.CANCELED}


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


@contextlib.contextmanager
def _submitter(instance) -> Iterator:
    """A function that submits one benchmark_job run for a date × candidate partition to the
    run queue, valid inside the block: what `dagster job launch -w workspace.yaml -j
    benchmark_job --tags ...` does, with the workspace loaded once for every run submitted."""
    # Dagster has no public call that submits a run of a workspace's job to the queue; these
    # are the functions its `dagster job launch` is made of, in the pinned version (1.13.27)
    from dagster._cli.job import _create_run
    from dagster._cli.workspace.cli_target import (
        get_code_location_from_workspace,
        get_remote_job_from_remote_repo,
        get_remote_repository_from_code_location,
        get_workspace_from_cli_opts,
    )
    from dagster_shared.cli import WorkspaceOpts

    opts = WorkspaceOpts(workspace=[str(WORKSPACE)])
    with get_workspace_from_cli_opts(instance, version=dg.__version__,
                                     workspace_opts=opts) as workspace:
        location = get_code_location_from_workspace(workspace, None)
        repo = get_remote_repository_from_code_location(location, None)
        job = get_remote_job_from_remote_repo(repo, "benchmark_job")

        def submit(name: str, date: str, candidate, batch: str) -> None:
            key = dg.MultiPartitionKey({"date": date, "candidate": name})
            tags = {"dagster/partition": str(key), "dagster/partition/date": date,
                    "dagster/partition/candidate": name, BATCH_TAG: batch,
                    **pool_tags(candidate.pool)}
            run = _create_run(instance=instance, code_location=location, remote_repo=repo,
                              remote_job=job, run_config={}, tags=tags,
                              op_selection=None, run_id=None)
            instance.submit_run(run.run_id, workspace)
        yield submit


def _failure(instance, run_id: str) -> str:
    """The last error a failed run logged (its step's or the run's)."""
    for entry in reversed(instance.all_logs(run_id)):
        event = entry.dagster_event
        if event is not None and event.event_type_value in ("STEP_FAILURE", "RUN_FAILURE"):
            return entry.message or event.message or ""
    return ""


def _queue(instance, names: list[str], date: str, candidates: dict, batch: str,
           results: dict) -> None:
    """Submit `names` to the run queue; one that cannot be is a result ("not queued") with
    Dagster's reason, and the others go on."""
    try:
        with _submitter(instance) as submit:
            for name in list(names):
                try:
                    submit(name, date, candidates[name], batch)
                except Exception as e:  # noqa: BLE001 (Dagster's own errors, named below)
                    results[name] = "not queued"
                    print(f"  FAILED to queue {name}:\n    {type(e).__name__}: {e}", flush=True)
                else:
                    print(f"  queued {name}", flush=True)
                names.remove(name)
    except Exception as e:  # noqa: BLE001 (the workspace did not load: none is queued)
        for name in names:
            results[name] = "not queued"
            print(f"  FAILED to queue {name}:\n    {type(e).__name__}: {e}", flush=True)


def run_all(candidates: dict, date: str, parallel: int, home: Path) -> int:
    write_instance_config(home, candidates.values())  # before any run is queued
    instance = dg.DagsterInstance.get()
    names = list(candidates)
    pools = ", ".join(sorted({f"{c.pool}: {c.pool_limit}" for c in candidates.values()
                              if c.pool})) or "none"
    print(f"{len(names)} candidates for {date}, {parallel} at once; pools {pools}", flush=True)
    batch, waiting, results, t0 = uuid.uuid4().hex, list(names), {}, time.monotonic()
    # under the guard (model_server/child.py): if this command is killed, even by SIGKILL,
    # the daemon stops instead of launching queued runs for nobody
    daemon = ChildProcess([_bin("dagster-daemon"), "run", "-w", str(WORKSPACE)],
                          name="the Dagster daemon", cwd=REPO, guard=True)
    daemon.spawn()
    try:
        while waiting or len(results) < len(names):
            runs = {r.tags["dagster/partition/candidate"]: r for r in instance.get_runs(
                dg.RunsFilter(tags={BATCH_TAG: batch}))}
            for name, run in runs.items():
                if name not in results and run.status in FINISHED:
                    results[name] = run.status
                    status = ("done" if run.status == dg.DagsterRunStatus.SUCCESS
                              else f"FAILED ({run.status.value})")
                    detail = "" if status == "done" else f"\n    {_failure(instance, run.run_id)}"
                    print(f"  {status}: {name} (run {run.run_id}){detail}", flush=True)
            free = parallel - sum(1 for name in runs if name not in results)
            if waiting and free > 0:
                _queue(instance, [waiting.pop(0) for _ in range(min(free, len(waiting)))],
                       date, candidates, batch, results)
            if daemon.poll() is not None:
                print(f"the Dagster daemon stopped (exit {daemon.poll()})", file=sys.stderr)
                return 1
            if len(results) < len(names):
                time.sleep(POLL_S)
    finally:
        daemon.stop(grace_s=30)
    failed = [n for n, s in results.items() if s != dg.DagsterRunStatus.SUCCESS]
    print(f"{len(names) - len(failed)} of {len(names)} candidates in "
          f"{time.monotonic() - t0:.0f} s" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0
