"""`servingbench run --all`: every candidate as its own Dagster run, at most N at once, through
the instance's run queue (DAGSTER_HOME).

The pools' limits go into the instance's dagster.yaml (`concurrency.runs.
tag_concurrency_limits`, assets/pools.py) and each run carries its pool as a run tag, so the
queued run coordinator is what keeps two runs of one pool apart, exactly as it does on the
cluster. A Dagster daemon (started here, stopped at the end) dequeues the runs and launches
each in a process of its own, like the Kubernetes run launcher's pod per run: a run that
crashes takes nobody else with it.

One code server (`dagster api grpc`, started here too) serves the definitions to the daemon
and to every `dagster job launch`, through a workspace file that names it. With the
project's workspace.yaml (a `python_module`) each of those processes would start a code
server of its own and import the definitions again: one per candidate queued, plus the
daemon's (~2 CPU-seconds each on a 2-core machine, docs/performance.md).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import dagster as dg
from servingbench.assets.pools import pool_tags, write_instance_config
from servingbench.pipelines.config import REPO
from servingbench.resources.model_server.child import ChildProcess, ChildStartError

POLL_S = 1.0
BATCH_TAG = "servingbench/run_all"
MODULE = "servingbench.pipelines.definitions"
LOCATION = MODULE  # workspace.yaml's location name: runs name the same code location either way
CODE_SERVER_READY_S = 120  # it imports the definitions first: seconds on a busy 2-core host
FINISHED = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE,
            dg.DagsterRunStatus.CANCELED}


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def _answers(path: Path) -> bool:
    """Whether a server listens on the Unix socket `path` (the code server binds it once its
    definitions are loaded)."""
    if not path.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True


def _code_server(folder: Path) -> tuple[ChildProcess, Path]:
    """A code server of the definitions on a Unix socket in `folder` (no port to collide
    on), and a workspace file naming it. Under the guard, like the daemon; its output is kept
    in `folder` for the error when it does not start (a definitions file that fails)."""
    sock, log = folder / "code.sock", folder / "code-server.log"
    workspace = folder / "workspace.yaml"
    workspace.write_text(json.dumps({"load_from": [{"grpc_server": {
        "socket": str(sock), "location_name": LOCATION}}]}))
    out = log.open("wb")
    server = ChildProcess([_bin("dagster"), "api", "grpc", "--socket", str(sock), "-m", MODULE,
                           "--location-name", LOCATION], name="the code server", cwd=REPO,
                          guard=True, stdout=out, stderr=subprocess.STDOUT,
                          ready=lambda _port: _answers(sock), poll_s=0.1,
                          ready_timeout_s=CODE_SERVER_READY_S,
                          tail=lambda: "\n".join(log.read_text(errors="replace")
                                                 .strip().splitlines()[-5:]))
    try:
        server.start()
    finally:
        out.close()  # the child holds its own copy
    return server, workspace


def _folder() -> Path:
    """A private folder for the socket: a Unix socket's path is at most ~107 bytes, which a
    deep TMPDIR can pass."""
    folder = Path(tempfile.mkdtemp(prefix="servingbench-run-all-"))
    if len(str(folder / "code.sock")) > 100:
        shutil.rmtree(folder)
        folder = Path(tempfile.mkdtemp(prefix="servingbench-run-all-", dir="/tmp"))
    return folder


def _launch(name: str, date: str, candidate, batch: str, workspace: Path) -> subprocess.Popen:
    """Start submitting one benchmark_job run for the date × candidate partition to the run
    queue (`dagster job launch`; several at once, so runs started together queue together)."""
    key = dg.MultiPartitionKey({"date": date, "candidate": name})
    tags = {"dagster/partition": str(key), "dagster/partition/date": date,
            "dagster/partition/candidate": name, BATCH_TAG: batch, **pool_tags(candidate.pool)}
    return subprocess.Popen([_bin("dagster"), "job", "launch", "-w", str(workspace), "-j",
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
    folder = _folder()
    try:
        server, workspace = _code_server(folder)
    except ChildStartError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        print(f"servingbench run: {exc}", file=sys.stderr)
        return 1
    # under the guard (model_server/child.py): if this command is killed, even by SIGKILL,
    # the daemon stops instead of launching queued runs for nobody
    daemon = ChildProcess([_bin("dagster-daemon"), "run", "-w", str(workspace)],
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
                launches[name] = _launch(name, date, candidates[name], batch, workspace)
            for name, proc in launches.items():
                _, err = proc.communicate()
                if proc.returncode == 0:
                    print(f"  queued {name}", flush=True)
                    continue
                results[name] = "not queued"
                tail = err.decode(errors="replace").strip().splitlines()[-3:]
                print(f"  FAILED to queue {name}:\n    " + "\n    ".join(tail), flush=True)
            for child in (daemon, server):  # neither may stop while runs are queued
                if child.poll() is not None:
                    print(f"{child.name} stopped (exit {child.poll()})", file=sys.stderr)
                    return 1
            if len(results) < len(names):
                time.sleep(POLL_S)
    finally:
        daemon.stop(grace_s=30)
        server.stop(grace_s=30)  # after the daemon: no run is launched through it any more
        shutil.rmtree(folder, ignore_errors=True)
    failed = [n for n, s in results.items() if s != dg.DagsterRunStatus.SUCCESS]
    print(f"{len(names) - len(failed)} of {len(names)} candidates in "
          f"{time.monotonic() - t0:.0f} s" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0
