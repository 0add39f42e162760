"""Fleet-scale helpers: small candidates files with pools, the provision → teardown interval
each run folder records, and a PostgreSQL server of the tests' own for a Dagster instance
on PostgreSQL (as deployed)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import yaml
from servingbench.assets.pools import POOL_TAG
from servingbench.resources.contract.timestamps import parse_ts

REPO = Path(__file__).resolve().parents[2]
SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"


def dagster_children() -> list[str]:
    """The command lines of this process's descendants that run Dagster (none once a
    command that started them has returned)."""
    import psutil

    out = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            cmd = " ".join(child.cmdline())
            if "dagster" in cmd and child.status() != psutil.STATUS_ZOMBIE:
                out.append(cmd)
    return out


def watch_folders(monkeypatch) -> list[Path]:
    """The folders `run --all` makes for its code server's socket, as it makes them."""
    from servingbench.pipelines.cli import run_all

    made: list[Path] = []
    make = run_all._folder

    def folder() -> Path:
        made.append(make())
        return made[-1]
    monkeypatch.setattr(run_all, "_folder", folder)
    return made


def candidates_file(tmp_path: Path, types: dict[str, str], pools: str | None = None,
                    requests: int = 4, extra: dict[str, str] | None = None) -> Path:
    """A candidates file: name -> instance type, a short load, `pools` as YAML flow text."""
    lines = [f"pools: {pools}"] if pools is not None else []
    lines.append("candidates:")
    for name, itype in types.items():
        more = f", {extra[name]}" if extra and name in extra else ""
        lines.append(
            f"  - {{name: {name}, instance_type: {itype}, model: {SCOUT}, precision: bf16, "
            "tensor_parallel: 8, scenario: {input_tokens: 64, output_tokens: 16, dataset: null}, "
            f"load: {{concurrency: [2], requests_per_step: {requests}, warmup_requests: 1}}, "
            f"price: {{sheet: {REPO / 'pipelines' / 'price_sheet.yaml'}}}{more}}}")
    path = tmp_path / "c.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def intervals(runs_dir: Path) -> dict[str, tuple[int, int]]:
    """candidate -> (provision started, teardown done) in epoch ns: the manifest's provision
    phase and the release stamped in pool.json after teardown."""
    out = {}
    for run_dir in sorted(Path(runs_dir).iterdir()):
        manifest = json.loads((run_dir / "manifest.json").read_text())
        pool = json.loads((run_dir / "pool.json").read_text())
        out[manifest["candidate"]] = (parse_ts(manifest["phases"]["provision"]["started_at"]),
                                      parse_ts(pool["released_at"]))
    return out


PG_BIN = Path("/usr/lib/postgresql/15/bin")


def _as_owner(owner: str | None) -> list[str]:
    """PostgreSQL refuses to run as root: as root, its commands run as `owner`."""
    return ["runuser", "-u", owner, "--"] if owner else []


@contextlib.contextmanager
def postgres_server() -> Iterator[dict]:
    """A PostgreSQL server of its own: a fresh cluster in a temporary folder (127.0.0.1 only,
    a free port), stopped and removed at the end. Over TCP it asks for a password (SCRAM),
    a new random one per server: trust would let any local user in; its unix socket, in the
    temporary folder, admits only its own OS user (peer). It runs under a watch
    (tests/support/pg_watch.py) that stops it and removes its folder when the test process
    dies, however it dies. Yields dagster-postgres' `postgres_db` settings. As root, the
    cluster belongs to `nobody` (a temporary folder directly under the system's, which
    `nobody` can reach; pytest's own is root's only)."""
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"PostgreSQL is not installed ({PG_BIN}); `make test` installs it")
    owner = "nobody" if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="servingbench-pg-"))
    data = root / "data"
    password = secrets.token_urlsafe(24)
    pwfile = root / "pwfile"
    pwfile.write_text(password + "\n")
    if owner:
        shutil.chown(root, owner)
        shutil.chown(pwfile, owner)
    pwfile.chmod(0o600)
    port = free_port()
    env = {**os.environ, "LC_ALL": "C"}
    subprocess.run([*_as_owner(owner), str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres",
                    "--auth-host=scram-sha-256", "--auth-local=peer", f"--pwfile={pwfile}",
                    "-E", "UTF8", "--no-sync"], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    pwfile.unlink()
    server = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("pg_watch.py")), str(os.getpid()),
         str(root), "--",
         *_as_owner(owner), str(PG_BIN / "postgres"), "-D", str(data), "-p", str(port),
         "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={root}",
         "-c", "fsync=off", "-c", "max_connections=200"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import psycopg2

        # ready when a login works: PostgreSQL listens on its port while it is still starting
        # up (and refuses every login then), so an open port is not enough
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres",
                                 password=password, connect_timeout=5).close()
                break
            except (OSError, psycopg2.OperationalError):
                if server.poll() is not None or time.monotonic() > deadline:
                    log = root / "server.log"
                    raise RuntimeError("PostgreSQL did not start: " + (
                        log.read_text()[-2000:] if log.exists() else "no log")) from None
                time.sleep(0.2)
        # psycopg2 (dagster-postgres' driver) named: SQLAlchemy 2.1's default is psycopg 3
        yield {"username": "postgres", "password": password, "hostname": "127.0.0.1",
               "db_name": "postgres", "port": port, "scheme": "postgresql+psycopg2"}
    finally:
        server.terminate()  # the watch's smart shutdown: the tests' connections are closed
        try:
            server.wait(45)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
        shutil.rmtree(root, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_instance_yaml(db: dict) -> str:
    """A dagster.yaml whose run, event log and schedule storage is that PostgreSQL server."""
    return yaml.safe_dump({"storage": {"postgres": {"postgres_db": db}},
                           "telemetry": {"enabled": False}})


def fleet_takes_turns(tmp_path: Path, dagster_home: Path, monkeypatch, capsys) -> None:
    """Three real runs through the instance's run queue (`run --all --parallel 3`): the
    daemon it starts launches each in a process of its own, and the queue's tag limits,
    written from the candidates file into the instance's dagster.yaml, keep the two p5 runs
    apart while the g6e run goes beside them. The command itself is called in-process, its
    environment the one the daemon and the runs inherit."""
    cands = candidates_file(tmp_path, {"p5-a": "p5.48xlarge", "p5-b": "p5.48xlarge",
                                       "g6e-a": "g6e.48xlarge"},
                            pools="{p5: 1, g6e: 2}", requests=4)
    env = {"DAGSTER_HOME": str(dagster_home),
           "SERVINGBENCH_DATA_DIR": str(tmp_path / "data"), "SERVINGBENCH_CANDIDATES": str(cands),
           "SERVINGBENCH_EMULATOR_TIME_SCALE": "0.3", "SERVINGBENCH_EMULATOR_COLD_START_S": "0.2"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SERVINGBENCH_PROFILE", raising=False)
    monkeypatch.chdir(REPO)
    from servingbench.pipelines.cli import main as cli

    folders = watch_folders(monkeypatch)
    rc = cli(["run", "--all", "--parallel", "3", "--date", "2026-11-29"])
    out = capsys.readouterr()
    assert rc == 0, out.out[-3000:] + out.err[-3000:]
    # it stops what it started (the daemon, the code server and the runs) and removes the
    # folder of its code server's socket
    assert dagster_children() == []
    assert len(folders) == 1 and not folders[0].exists(), folders
    assert "3 of 3 candidates" in out.out, out.out[-3000:]
    assert "pools g6e: 2, p5: 1" in out.out
    limits = yaml.safe_load((dagster_home / "dagster.yaml").read_text())
    assert limits["concurrency"]["runs"]["tag_concurrency_limits"] == [
        {"key": POOL_TAG, "value": "g6e", "limit": 2}, {"key": POOL_TAG, "value": "p5", "limit": 1}]
    spans = intervals(tmp_path / "data" / "runs")
    assert sorted(spans) == ["g6e-a", "p5-a", "p5-b"]
    (a0, a1), (b0, b1) = sorted([spans["p5-a"], spans["p5-b"]])
    assert a1 <= b0, "the two p5 runs held nodes at the same time"
    # the queue holds a pool for a whole run: the p5 runs themselves take turns, and the
    # g6e run is in progress beside one of them
    with dg.DagsterInstance.get() as instance:
        runs = {r.dagster_run.tags["dagster/partition/candidate"]: (r.start_time, r.end_time)
                for r in instance.get_run_records()}
    (ra0, ra1), (rb0, rb1) = sorted([runs["p5-a"], runs["p5-b"]])
    assert ra1 <= rb0, "the two p5 runs were in progress at the same time"
    g0, g1 = runs["g6e-a"]
    assert (g0 < ra1 and ra0 < g1) or (g0 < rb1 and rb0 < g1), \
        "the g6e run did not run beside the p5 runs"
    records = [json.loads(p.read_text()) for p in (tmp_path / "data" / "runs").glob("*/pool.json")]
    assert sorted(r["pool"] for r in records) == ["g6e", "p5", "p5"]
    assert all(r["queued"] for r in records)  # each went through the run queue
