"""ChildProcess: a process this one starts, waits for and stops, and that never outlives it.

Every server this host runs for a benchmark (llama.cpp's launcher, the swap driver, HAProxy,
the Dagster daemon of `run --all`) is started the same way:

* in a process group of its own, so `stop` reaches everything it started (SIGTERM to the
  group, SIGKILL after a grace period, the group killed again in case a member lingers);
* ready when its port file holds a port and `ready(port)` says so (a health answer, a
  socket), before a deadline; an exit or the deadline raises the caller's error with the
  end of its output;
* tied to this process, not to the thread that started it: the child is handed the read
  end of a pipe only this process holds, and this process's id. When this process dies,
  by SIGKILL too (an OOM kill, pytest-timeout), the pipe reads EOF and the child's parent
  id changes; the child then stops its own group (SIGTERM, SIGKILL 2 s later), so nothing
  it started is alive 5 s later. A Python child calls `watch_parent()` first thing; a
  program that cannot (HAProxy, a third-party daemon) is started under the guard below
  (`guard=True`), a small Python process that holds the pipe, runs the program in its
  group and stops both when the pipe closes. (PR_SET_PDEATHSIG is not used: it fires when
  the starting *thread* exits, and replicas are started from short-lived threads.)

    python -m servingbench.resources.model_server.child -- PROGRAM [ARG ...]

The emulator's own launcher (emulator/process.py, `--parent-pid`) watches its parent the same
way from inside the self-contained emulator package.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from servingbench.resources.contract import settings

PARENT_FD_ENV = settings.setting("SERVINGBENCH_PARENT_FD").name    # the pipe's read end
PARENT_PID_ENV = settings.setting("SERVINGBENCH_PARENT_PID").name  # the parent to keep
WATCH_POLL_S = 0.25
STOP_GRACE_S = 2.0  # after the parent is gone: SIGTERM, then SIGKILL this much later


class ChildStartError(RuntimeError):
    """The child exited during start or was not ready in time (the default error)."""


class ChildProcess:
    """`with ChildProcess(cmd, name=..., port_file=..., ready=...) as child: child.port`."""

    def __init__(self, cmd: list[str], *, name: str, env: dict[str, str] | None = None,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                 port_file: Path | None = None, ready: Callable[[int | None], bool] | None = None,
                 ready_timeout_s: float = 30.0, poll_s: float = 0.02, nice: int = 0,
                 guard: bool = False, tail: Callable[[], str] | None = None,
                 error: Callable[[str], Exception] = ChildStartError, cwd: Path | None = None):
        self.cmd, self.name, self.env = list(cmd), name, env
        self.stdout, self.stderr, self.cwd = stdout, stderr, cwd
        self.port_file, self.ready = port_file, ready
        self.ready_timeout_s, self.poll_s, self.nice = ready_timeout_s, poll_s, nice
        self.guard, self.tail, self.error = guard, tail or (lambda: ""), error
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self._pipe_w: int | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def __enter__(self) -> ChildProcess:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def spawn(self) -> subprocess.Popen:
        """Start the process (not waiting for it): its own group, the parent's pipe and id."""
        if self.port_file is not None:
            Path(self.port_file).unlink(missing_ok=True)
        r, w = os.pipe()  # both ends non-inheritable; only r is passed on
        env = dict(os.environ if self.env is None else self.env)
        env[PARENT_FD_ENV], env[PARENT_PID_ENV] = str(r), str(os.getpid())
        cmd = ([sys.executable, "-m", "servingbench.resources.model_server.child", "--",
                *self.cmd] if self.guard else self.cmd)
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.stdout,
                                         stderr=self.stderr, env=env, cwd=self.cwd,
                                         pass_fds=(r,), start_new_session=True)
        except BaseException:
            os.close(w)
            raise
        finally:
            os.close(r)
        self._pipe_w = w
        if self.nice:  # before its interpreter has started a thread: every one inherits it
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, self.proc.pid, self.nice)
        return self.proc

    def start(self) -> int | None:
        """Spawn, then wait until ready; returns the port (None without a port file)."""
        self.spawn()
        return self.wait_ready()

    def wait_ready(self) -> int | None:
        """After `spawn` (and whatever reads the child's output): wait until ready; an exit
        or the deadline stops it and raises `error`."""
        deadline = time.monotonic() + self.ready_timeout_s
        try:
            while True:
                if self.proc.poll() is not None:
                    raise self.error(f"{self.name} exited during start (exit code "
                                     f"{self.proc.returncode}):\n{self.tail()}")
                if self.port is None and self.port_file is not None:
                    self.port = _read_port(Path(self.port_file))
                if (self.port_file is None or self.port is not None) and (
                        self.ready is None or self.ready(self.port)):
                    return self.port
                if time.monotonic() > deadline:
                    raise self.error(f"{self.name} not ready after {self.ready_timeout_s:g} s:"
                                     f"\n{self.tail()}")
                time.sleep(self.poll_s)
        except BaseException:
            self.stop()
            raise

    def stop(self, grace_s: float = 5.0) -> int | None:
        """SIGTERM to the child's group, SIGKILL after `grace_s`; returns its exit code."""
        rc = None
        if self.proc is not None:
            if self.proc.poll() is None:
                _signal_group(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    _signal_group(self.proc.pid, signal.SIGKILL)
                    self.proc.wait()
            # the group may hold more than its leader: none of it survives the stop
            _signal_group(self.proc.pid, signal.SIGKILL)
            rc = self.proc.returncode
        if self._pipe_w is not None:
            os.close(self._pipe_w)
            self._pipe_w = None
        return rc


def _read_port(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # a half-written file is read again


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


# --- in the child ---------------------------------------------------------------------------

def parent_gone(fd: int | None, parent_pid: int | None) -> Callable[[float], bool]:
    """A wait of up to `timeout` seconds that is True once the parent is gone."""
    def wait(timeout: float) -> bool:
        if parent_pid is not None and os.getppid() != parent_pid:
            return True
        if fd is None:
            time.sleep(timeout)
            return False
        readable, _, _ = select.select([fd], [], [], timeout)
        if readable:
            try:
                return os.read(fd, 64) == b""  # EOF: every write end closed
            except OSError:
                return True
        return False
    return wait


def group_members(pgid: int) -> list[int]:
    """The processes of group `pgid` that are not zombies (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(entry))
    return out


def _stop_own_group(then: Callable[[], None] | None = None) -> None:
    """SIGTERM to the rest of this process's group (to itself alone when it leads none),
    SIGKILL to the whole group later. Not SIGTERM to itself: a process that dies of it (the
    default) or whose program ends on it (the guard) would take this thread, and with it the
    SIGKILL, along, and a member that ignores SIGTERM would outlive it."""
    me = os.getpid()
    leader = os.getpgrp() == me

    def term_others() -> None:
        for pid in group_members(me) if leader else ():
            if pid != me:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGTERM)
    # the parent may have held the other end of our output: a write can fail (EPIPE), and
    # must not keep the group from being stopped
    with contextlib.suppress(OSError, ValueError):
        print("servingbench: parent process gone; stopping", file=sys.stderr, flush=True)
    if then is not None:
        then()
    if leader:
        term_others()
        time.sleep(STOP_GRACE_S)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(0, signal.SIGKILL)
    else:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(me, signal.SIGTERM)
        time.sleep(STOP_GRACE_S)
        os.kill(me, signal.SIGKILL)


def _watch_args() -> tuple[int | None, int | None]:
    fd, pid = os.environ.pop(PARENT_FD_ENV, None), os.environ.pop(PARENT_PID_ENV, None)
    return (int(fd) if fd and fd.isdigit() else None, int(pid) if pid and pid.isdigit() else None)


def watch_parent() -> bool:
    """In a child started by ChildProcess: a daemon thread that stops this process's group
    once the parent is gone. False when not started that way (nothing to watch)."""
    fd, pid = _watch_args()
    if fd is None and pid is None:
        return False
    gone = parent_gone(fd, pid)
    if gone(0):  # the parent died before we got here: nobody to serve
        _stop_own_group()

    def loop() -> None:
        while not gone(WATCH_POLL_S):
            pass
        _stop_own_group()

    threading.Thread(target=loop, name="parent-watch", daemon=True).start()
    return True


def main(argv: list[str] | None = None) -> int:
    """The guard: run PROGRAM in this group, pass SIGTERM/SIGINT on, stop both when the
    parent is gone; exits with PROGRAM's code."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] != ["--"] or len(argv) < 2:
        print("usage: python -m servingbench.resources.model_server.child -- PROGRAM [ARG ...]",
              file=sys.stderr)
        return 2
    fd, pid = _watch_args()  # popped: the program does not see them
    proc = subprocess.Popen(argv[1:])

    def forward(sig, _frame) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    gone = parent_gone(fd, pid)

    stopping = threading.Event()

    def watch() -> None:
        while proc.poll() is None:
            if gone(WATCH_POLL_S):
                stopping.set()
                _stop_own_group(then=lambda: forward(signal.SIGTERM, None))
                return
    watcher = threading.Thread(target=watch, name="parent-watch", daemon=True)
    watcher.start()
    code = proc.wait()
    if stopping.is_set():
        # the program ended on the SIGTERM, but what it started may ignore SIGTERM: stay
        # until the group's SIGKILL (which ends this guard too); returning here would end
        # the watch thread with the process, and the SIGKILL with it
        watcher.join()
    return code


if __name__ == "__main__":
    sys.exit(main())
