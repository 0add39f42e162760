"""The suite's own guard (tests/support/leftovers.py): a test session that leaves a process
alive past its end names it with the test that started it, kills it and fails; a session
whose processes all end passes. Run as inner pytest sessions, alone and on xdist workers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

LEAVES = """
import os, subprocess, sys

def test_starts_a_server_and_forgets_it():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         start_new_session=True)  # its own group: gone from ours too
    with open(os.environ["PID_FILE"], "w") as f:
        f.write(str(p.pid))

def test_starts_one_and_stops_it():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    p.kill()
    p.wait()

def test_uses_multiprocessing():
    # what a test using multiprocessing starts in the session's process, and that lives as
    # long as it does: its resource tracker and fork server. No leftover.
    from multiprocessing import forkserver, resource_tracker
    resource_tracker.ensure_running()
    forkserver.ensure_running()
"""


def _session(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, int]:
    (tmp_path / "test_inner.py").write_text(LEAVES)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTEST_LEFTOVER_GRACE_S": "1",
           "PID_FILE": str(tmp_path / "pid")}
    # the inner session is this test's own: a worker's id or options meant for the outer run
    # (PYTEST_ADDOPTS="--durations=N" lists the inner tests' names after the report) are not
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.support.leftovers",
                        "-p", "no:cacheprovider", "-p", "no:randomly", "--basetemp",
                        str(tmp_path / "base"), "-q", *args, str(tmp_path / "test_inner.py")],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=240)
    return p, int((tmp_path / "pid").read_text())


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("args", [pytest.param((), id="alone"),
                                  pytest.param(("-n", "2"), id="xdist")])
def test_a_process_left_behind_is_named_killed_and_fails_the_run(tmp_path, args):
    p, pid = _session(tmp_path, *args)
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert "3 passed" in out, out  # every test passed: the leftover alone fails the run
    assert "processes left behind" in out
    assert f"pid {pid} " in out and "test_starts_a_server_and_forgets_it" in out, out
    named = out.split("processes left behind")[1]
    assert "test_starts_one_and_stops_it" not in named and "test_uses_multiprocessing" not in named
    assert named.count("pid ") == 1, named
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)
