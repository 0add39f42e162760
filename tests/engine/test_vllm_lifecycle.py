"""Nothing of real vLLM (its API server, engine core and worker) outlives a start that fails,
a start past its deadline, or the death of the process that started it (kill -9). Each test
starts vLLM's CPU build itself and stops it early, so none pays a whole start.

Skipped, with the reason, only when vLLM is not installed; `make test` installs it first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest
from servingbench.resources.model_server.local.vllm_cpu import (
    EngineStartError,
    VllmProcess,
    command,
    free_port,
    group_members,
    model_dir,
)

from tests.support.vllm import EAGER, WHY, candidate

pytestmark = [pytest.mark.skipif(WHY is not None, reason=f"vLLM's CPU build: {WHY}"),
              pytest.mark.slow]


def _gone_within(pgid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not group_members(pgid)


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read()
    except OSError:
        return ""


def _wait_for_engine_core(pgid: int, within_s: float = 240) -> None:
    """Until vLLM's engine core runs (the API server has spawned it)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if any(_comm(pid).startswith("VLLM::EngineCor") for pid in group_members(pgid)):
            return
        time.sleep(0.2)
    pytest.fail(f"vLLM's engine core did not start within {within_s} s")


def test_an_engine_that_fails_to_start_leaves_no_process():
    # one block of KV cache cannot hold one request of the model's length: vLLM's engine
    # core refuses to start, and the API server exits with it
    port = free_port()
    cmd = command(candidate(), model_dir(), port, (*EAGER, "--num-gpu-blocks-override", "1"))
    proc = VllmProcess(cmd, port, ready_timeout_s=300)
    with pytest.raises(EngineStartError,
                       match=r"exited during start \(exit code 1\):\n.*ValueError: .*cache"):
        proc.start()
    assert _gone_within(proc.proc.pid, 5)


def test_a_start_past_its_deadline_leaves_no_process():
    port = free_port()
    proc = VllmProcess(command(candidate(), model_dir(), port, EAGER), port, ready_timeout_s=240)
    proc.spawn()
    # its deadline passes once vLLM's engine core runs: every process of vLLM is up, and
    # the server has not answered yet
    _wait_for_engine_core(proc.proc.pid)
    proc.child.ready_timeout_s = 0
    with pytest.raises(EngineStartError, match=r"vLLM not ready after 0 s"):
        proc.wait_ready()
    assert _gone_within(proc.proc.pid, 5)


STARTER = """
import sys, time
from servingbench.resources.model_server.local.vllm_cpu import VllmProcess, command, free_port, model_dir
from tests.support.vllm import EAGER, candidate
port = free_port()
proc = VllmProcess(command(candidate(), model_dir(), port, EAGER), port)
import threading
threading.Thread(target=proc.start, daemon=True).start()
while proc.proc is None:
    time.sleep(0.01)
print(proc.proc.pid, flush=True)
time.sleep(600)
"""


def test_the_server_does_not_outlive_its_starter_killed_during_start():
    starter = subprocess.Popen([sys.executable, "-c", STARTER], stdout=subprocess.PIPE, text=True)
    pgid = None
    try:
        pgid = int(starter.stdout.readline())
        _wait_for_engine_core(pgid)
        starter.send_signal(signal.SIGKILL)
        starter.wait()
        # ChildProcess's guard: SIGTERM to the group, SIGKILL 2 s later
        assert _gone_within(pgid, 30), group_members(pgid)
    finally:
        starter.kill()
        starter.wait()
        starter.stdout.close()
        if pgid is not None:  # a failed guard left them: not to outlive the test
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
