"""No test leaves a process behind (a pytest plugin: tests/conftest.py takes its hooks): every process a test session starts carries a mark in
its environment, and when the session ends (every fixture torn down) any process still
alive with this session's mark is named, with the test that started it, killed, and fails
the run.

The mark is the environment variable OWNER, set by each pytest process (the controller and
each xdist worker) for itself: a process inherits it from whatever started it (a server a
test starts, the code server a Dagster daemon starts for it, the runs that code server
starts), however deep, and keeps it after its parent dies and it is re-parented to PID 1.
A child started with an environment of its own making (an allow-list) carries no mark and
is not seen here; the tests that start such children look for their own (the hostile
orphan tests).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

OWNER = "PYTEST_PROCESS_OWNER"
# a server told to stop at the end of its test is given this long to go (the test of this
# check shortens it)
GRACE_S = float(os.environ.get("PYTEST_LEFTOVER_GRACE_S") or 10.0)


@dataclass(frozen=True)
class Leftover:
    pid: int
    cmdline: str
    started_by: str  # PYTEST_CURRENT_TEST when it was started: the test and its phase

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.cmdline[:160]}), started by {self.started_by}"


def mark() -> str:
    """Mark every process this one starts from now on; returns the mark."""
    token = f"{os.getpid()}-{secrets.token_hex(4)}"
    os.environ[OWNER] = token
    return token


def _environ(pid: int) -> dict[bytes, bytes] | None:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, or not ours to read
        return None
    out = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep:
            out[name] = value
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            "utf-8", "replace").strip()
    except OSError:
        return ""


def _own_helpers() -> set[int]:
    """This interpreter's own multiprocessing helpers (the resource tracker, the fork
    server), started by a test that used multiprocessing: they end when it does, with the
    session, and are no test's leftover."""
    import multiprocessing.forkserver as forkserver
    import multiprocessing.resource_tracker as tracker

    pids = {getattr(tracker._resource_tracker, "_pid", None),
            getattr(forkserver._forkserver, "_forkserver_pid", None)}
    return {p for p in pids if p}


def find(token: str) -> list[Leftover]:
    """The live processes carrying `token`, but this one and its multiprocessing helpers."""
    skip, want = {os.getpid(), *_own_helpers()}, token.encode()
    found = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        env = _environ(int(entry.name))
        if env is None or env.get(OWNER.encode()) != want:
            continue
        found.append(Leftover(int(entry.name), _cmdline(int(entry.name)),
                              env.get(b"PYTEST_CURRENT_TEST", b"the session").decode(
                                  "utf-8", "replace")))
    return found


def reap(token: str, grace_s: float = GRACE_S) -> list[Leftover]:
    """Those still alive `grace_s` after the session's end, killed (SIGKILL)."""
    deadline = time.monotonic() + grace_s
    left = find(token)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = find(token)
    for p in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p.pid, signal.SIGKILL)
    return left


# --- the hooks -----------------------------------------------------------------------------

def pytest_configure(config):
    config.leftover_mark = mark()
    config.leftovers = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist's controller: what each worker found at its end."""
    node.config.leftovers.extend(getattr(node, "workeroutput", {}).get("leftovers", []))


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    found = [str(p) for p in reap(config.leftover_mark)]
    if hasattr(config, "workerinput"):  # an xdist worker: its controller reports them
        config.workeroutput["leftovers"] = found
        return
    config.leftovers.extend(found)
    if config.leftovers and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if config.leftovers:
        terminalreporter.section("processes left behind", red=True, bold=True)
        for line in config.leftovers:
            terminalreporter.line(line)
        terminalreporter.line(f"{len(config.leftovers)} process(es) outlived the session by "
                              f"{GRACE_S:g} s: killed; the run fails (tests/support/leftovers.py)")
