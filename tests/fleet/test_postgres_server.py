"""The tests' own PostgreSQL server (tests/support/fleet.py `postgres_server`) lets no one in
without its password over TCP (it used to trust every local user), and does not outlive the
test process that started it, even one killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.support.fleet import PG_BIN, postgres_server

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not (PG_BIN / "initdb").exists(),
                                reason=f"PostgreSQL is not installed ({PG_BIN})")


def _connect(db: dict, password: str | None):
    import psycopg2

    return psycopg2.connect(host=db["hostname"], port=db["port"], user=db["username"],
                            dbname=db["db_name"], password=password, connect_timeout=10)


def test_tcp_needs_the_password():
    import psycopg2

    with postgres_server() as db:
        assert db["password"]
        for wrong in ("", "postgres", None):
            with pytest.raises(psycopg2.OperationalError, match="password"):
                _connect(db, wrong)
        with _connect(db, db["password"]) as conn, conn.cursor() as cur:
            cur.execute("select 1")
            assert cur.fetchone() == (1,)
        conn.close()


HOLDER = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from tests.support.fleet import postgres_server
with postgres_server() as db:
    print(json.dumps(db), flush=True)
    time.sleep(600)
"""


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def test_the_server_ends_with_a_killed_test_process(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(REPO)], stdout=subprocess.PIPE,
                              text=True, cwd=REPO)
    try:
        db = json.loads(holder.stdout.readline())
        port = db["port"]
        assert _listening(port)
        roots = [p for p in Path(tempfile.gettempdir()).glob("servingbench-pg-*")
                 if (p / "data" / "postmaster.opts").is_file()
                 and f"-p {port}" in (p / "data" / "postmaster.opts").read_text().replace('"', "")]
        assert len(roots) == 1
        os.kill(holder.pid, signal.SIGKILL)  # no finally, no atexit: as a CI timeout kills
        holder.wait()
        deadline = time.monotonic() + 10
        while (_listening(port) or roots[0].exists()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _listening(port), "the server outlived the killed test process"
        assert not roots[0].exists()
    finally:
        if holder.poll() is None:
            holder.kill()
