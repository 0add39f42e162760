"""Parallel runs share one DuckDB file, which only one process may open for writing: a run
that finishes while another publishes waits for the lock instead of failing."""

from __future__ import annotations

import subprocess
import sys

import duckdb
import pytest
from servingbench.resources.storage.store import connect

HOLD = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
con.close()
"""


def _holder(path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), str(seconds)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_writer_waits_for_the_lock(tmp_path):
    path = tmp_path / "servingbench.duckdb"
    holder = _holder(path, 2.0)
    try:
        with pytest.raises(duckdb.IOException, match="lock"):
            duckdb.connect(str(path))          # what a parallel run met before
        con = connect(path, wait_s=60)
        con.execute("INSERT INTO t VALUES (1)")
        assert con.execute("SELECT count(*) FROM t").fetchall() == [(1,)]
        con.close()
    finally:
        holder.wait(timeout=60)


def test_the_wait_is_bounded(tmp_path):
    path = tmp_path / "servingbench.duckdb"
    holder = _holder(path, 30.0)
    try:
        with pytest.raises(duckdb.IOException, match="lock"):
            connect(path, wait_s=0.5)
    finally:
        holder.kill()
        holder.wait(timeout=60)
