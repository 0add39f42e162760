"""Fixtures: the fixed-timing server as a real process on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SERVER = Path(__file__).with_name("fixed_server.py")
ROOT = Path(__file__).resolve().parents[2]


class ServerProcess:
    def __init__(self, tmp: Path, args: list[str]) -> None:
        self.dir = tmp
        self.port_file = tmp / f"port-{time.monotonic_ns()}"
        self.ground_truth = tmp / f"truth-{time.monotonic_ns()}.jsonl"
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--port", "0", "--port-file", str(self.port_file),
             "--ground-truth", str(self.ground_truth), *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 15
        while not self.port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"test server did not start: {self.proc.stderr.read().decode()}")
            time.sleep(0.02)
        self.port = int(self.port_file.read_text())
        self.base_url = f"http://127.0.0.1:{self.port}"

    def truth_rows(self) -> list[dict]:
        """Every ground-truth line, the probe's (no request id) included."""
        return [json.loads(x) for x in self.ground_truth.read_text().splitlines() if x.strip()]

    def truth(self) -> dict[str, dict]:
        """Ground truth by request id (the run's requests only)."""
        return {r["request_id"]: r for r in self.truth_rows() if r["request_id"]}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def start_server(tmp_path):
    started: list[ServerProcess] = []

    def start(*args: str) -> ServerProcess:
        s = ServerProcess(tmp_path, list(args))
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def server(start_server) -> ServerProcess:
    """Fixed timing: TTFT 20 ms, ITL 2 ms."""
    return start_server("--ttft-ms", "20", "--itl-ms", "2")


def run_cli(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with contextlib.suppress(KeyError):
        del env["SERVINGBENCH_TEST_KEY"]
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "load", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)
