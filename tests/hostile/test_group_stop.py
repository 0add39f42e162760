"""A child that watches its parent (model_server/child.py) stops its whole group when the
parent dies: SIGTERM to the others, then SIGKILL to all, even when the child itself would
die of the SIGTERM and a member of its group ignores it. Before, the child sent SIGTERM to
its own group, died of it, and the SIGKILL that was to follow 2 s later never came."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from servingbench.resources.model_server.child import STOP_GRACE_S, group_members

# the watched child: default SIGTERM handling, one grandchild that ignores SIGTERM
CHILD = ("import subprocess, sys, time\n"
         "from servingbench.resources.model_server.child import watch_parent\n"
         "watch_parent()\n"
         "subprocess.Popen([sys.executable, '-c', 'import signal, sys, time; "
         "signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(300)'])\n"
         "time.sleep(300)\n")

STARTER = f"""
import sys, time
from servingbench.resources.model_server.child import ChildProcess
child = ChildProcess([sys.executable, "-c", {CHILD!r}], name="watched")
child.spawn()
print(child.pid, flush=True)
time.sleep(300)
"""


def _gone(pgid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not group_members(pgid)


def test_a_watched_child_that_dies_of_sigterm_still_kills_its_group():
    starter = subprocess.Popen([sys.executable, "-c", STARTER], stdout=subprocess.PIPE, text=True)
    pgid = None
    try:
        pgid = int(starter.stdout.readline())
        deadline = time.monotonic() + 10
        while len(group_members(pgid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(group_members(pgid)) == 2
        time.sleep(1.0)  # the grandchild's interpreter is up and ignores SIGTERM by now
        starter.send_signal(signal.SIGKILL)
        starter.wait()
        assert _gone(pgid, STOP_GRACE_S + 3), group_members(pgid)
    finally:
        starter.kill()
        starter.wait()
        starter.stdout.close()
        if pgid is not None:  # a failed stop left them: not to outlive the test
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
