"""`servingbench run --all`: every candidate as its own Dagster run, at most N at once, through
the instance's run queue (DAGSTER_HOME).

The pools' limits go into the instance's dagster.yaml (`concurrency.runs.
tag_concurrency_limits`, assets/pools.py) and each run carries its pool as a run tag, so the
queued run coordinator is what keeps two runs of one pool apart, exactly as it does on the
cluster. A Dagster daemon (started here, stopped at the end) dequeues the runs and launches
each in a process of its own, like the Kubernetes run launcher's pod per run: a run that
crashes takes nobody else with it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
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


def _launch(name: str, date: str, candidate, batch: str) -> subprocess.Popen:
    """Start submitting one benchmark_job run for the date × candidate partition to the run
    queue (`dagster job launch`; several at once, so runs started together queue together)."""
    key = dg.MultiPartitionKey({"date": date, "candidate": name})
    tags = {"dagster/partition": str(key), "dagster/partition/date": date,
            "dagster/partition/candidate": name, BATCH_TAG: batch, **pool_tags(candidate.pool)}
    return subprocess.Popen([_bin("dagster"), "job", "launch", "-w", str(WORKSPACE), "-j",
                             "benchmark_job", "--tags", json.dumps(tags)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _failure(instance, run_id: str) -> str:
    """The last error a failed run logged (its step's or the run's)."""
    for entry in reversed(instance.all_logs(run_id)):
        event = entry.dagster_event
        if event is not None and event.event_type_value in ("STEP_FAILURE", "RUN_FAILURE"):
            return entry.message or event.message or ""
    return ""


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
            launches = {}
            active = sum(1 for name in runs if name not in results)
            while waiting and active + len(launches) < parallel:
                name = waiting.pop(0)
                launches[name] = _launch(name, date, candidates[name], batch)
            for name, proc in launches.items():
                _, err = proc.communicate()
                if proc.returncode == 0:
                    print(f"  queued {name}", flush=True)
                    continue
                results[name] = "not queued"
                tail = err.decode(errors="replace").strip().splitlines()[-3:]
                print(f"  FAILED to queue {name}:\n    " + "\n    ".join(tail), flush=True)
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
