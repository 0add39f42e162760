"""The tests' PostgreSQL server under a watch that ends it with the test process:

    python tests/support/pg_watch.py PARENT_PID ROOT -- COMMAND...

Starts COMMAND (the postmaster, through `runuser` as root) and polls every 0.2 s whether
PARENT_PID is still its parent. PostgreSQL has no way to follow its parent, and a
parent-death signal would not survive `runuser`'s change of user, so a pytest that is
killed (SIGKILL, a CI timeout) used to leave the server running. When the parent is gone it
stops the postmaster at once (SIGQUIT, its immediate shutdown), waits for it and removes
ROOT. SIGTERM to this process is the ordinary end: passed on as the postmaster's smart
shutdown (SIGTERM), then the same wait and removal.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path


def _postmaster(root: Path) -> int | None:
    """The postmaster's pid from its lock file (runuser's child, not ours)."""
    try:
        return int((root / "data" / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def _stop(child: subprocess.Popen, root: Path, sig: int) -> None:
    pid = _postmaster(root)
    try:  # the postmaster itself (runuser does not pass every signal on), else its starter
        os.kill(pid if pid is not None else child.pid, sig)
    except ProcessLookupError:
        pass
    try:
        child.wait(30)
    except subprocess.TimeoutExpired:
        if (pid := _postmaster(root)) is not None:
            os.kill(pid, signal.SIGKILL)
        child.kill()
        child.wait(10)
    shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str]) -> int:
    parent, root, sep, *command = argv
    assert sep == "--", "usage: pg_watch.py PARENT_PID ROOT -- COMMAND..."
    parent_pid, root = int(parent), Path(root)
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(signal.SIGTERM))
    log = open(root / "server.log", "wb")  # noqa: SIM115 - the server's for its whole life
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
    while child.poll() is None:
        if stopping:
            _stop(child, root, signal.SIGTERM)
            return 0
        if os.getppid() != parent_pid:  # the test process is gone, however it ended
            _stop(child, root, signal.SIGQUIT)
            return 0
        time.sleep(0.2)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
