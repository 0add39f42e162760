"""After `kill -9` of a run (an OOM kill, pytest-timeout), nothing it started is alive 5 s
later: HAProxy, the emulator replicas, the swap driver's process, a program under the guard
(as HAProxy and `run --all`'s Dagster daemon run) and, when the engine is installed,
llama.cpp's server. Each child watches its parent (model_server/child.py); HAProxy cannot,
so its guard does. A process started from a short-lived thread is not stopped when that
thread ends (the replicas are started from threads)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from servingbench.resources.model_server.fleet.balancer import find_haproxy
from servingbench.resources.model_server.local.llamacpp import engine_available

ROOT = Path(__file__).resolve().parents[2]
MODEL = Path.home() / ".cache" / "servingbench" / "models" / "gemma-3-270m-q2_k.gguf"
GONE_WITHIN_S = 5.0  # the finding's bound: SIGTERM to the group, SIGKILL 2 s later

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(find_haproxy() is None, reason="haproxy is not installed")]


def _alive(procs: list[psutil.Process]) -> list[str]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
        except psutil.NoSuchProcess:
            pass
    return out


def _start(tmp_path: Path, extra: list[str]) -> tuple[subprocess.Popen, list[psutil.Process]]:
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.orphans", str(tmp_path), *extra],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 180
    while not (tmp_path / "ready").exists():
        if proc.poll() is not None:
            pytest.fail(f"the run did not start: {proc.stderr.read().decode()[-3000:]}")
        assert time.monotonic() < deadline, "the run did not start in 180 s"
        time.sleep(0.1)
    return proc, psutil.Process(proc.pid).children(recursive=True)


@pytest.mark.parametrize("engine", [
    "emulator",
    pytest.param("llama.cpp", marks=pytest.mark.skipif(
        engine_available() is not None or not MODEL.is_file(),
        reason=f"real engine: {engine_available() or f'{MODEL.name} not cached'}")),
])
def test_nothing_a_killed_run_started_is_alive_5_s_later(tmp_path, engine):
    run, descendants = _start(tmp_path, ["--llamacpp", str(MODEL)] if engine == "llama.cpp"
                              else [])
    names = " ".join(" ".join(p.cmdline()) for p in descendants)
    # what the run started: HAProxy (under its guard), two emulators, the swap driver, ...
    assert "haproxy" in names and names.count("servingbench.emulator") == 2
    assert "swap.process" in names and "sleep 600" in names
    if engine == "llama.cpp":
        assert "llamacpp_serve" in names
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    deadline = time.monotonic() + GONE_WITHIN_S
    while _alive(descendants) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _alive(descendants)
    for p in descendants:  # whatever the outcome, nothing outlives the test
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    assert left == [], f"alive {GONE_WITHIN_S:g} s after the run was killed: {left}"


def test_a_child_started_from_a_thread_outlives_the_thread_not_the_process(tmp_path):
    # PR_SET_PDEATHSIG would stop a child when the thread that started it ends; the watch
    # follows the process, so a replica started from a thread keeps serving
    from servingbench.resources.model_server.child import ChildProcess

    box: list[ChildProcess] = []
    t = threading.Thread(target=lambda: box.append(
        ChildProcess([sys.executable, "-c", "from servingbench.resources.model_server.child "
                      "import watch_parent; import time; watch_parent(); time.sleep(60)"],
                     name="sleeper").__enter__()))
    t.start()
    t.join()
    try:
        time.sleep(1.0)  # several watch periods after the thread ended
        assert box[0].poll() is None
    finally:
        box[0].stop()
    assert box[0].poll() is not None
