"""What the load generator's tests share: configs, record readers, the fixed-timing server as
a real process on 127.0.0.1, and the `servingbench load` command as a subprocess."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow as pa

from resources.contract.schemas import read_records
from resources.loadgen import LoadConfig
from tests.support.net import stop_process, wait_port_file


def config(base_url: str, **kw) -> LoadConfig:
    args = dict(endpoint=base_url, model="fixed", concurrency=[2], requests_per_step=6,
                warmup_requests=0, input_tokens=16, output_tokens=8, drain_timeout_s=10)
    args.update(kw)
    return LoadConfig(**args)


def rows(run_dir, name: str = "steady_state_request_log") -> list[dict]:
    table = read_records(run_dir, name)
    assert isinstance(table, pa.Table)
    return table.to_pylist()


def ns(ts) -> int:
    """A pandas/pyarrow timestamp as integer ns since the epoch."""
    return ts.value


def is_uuid(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False


SERVER = Path(__file__).with_name("fixed_server.py")
ROOT = Path(__file__).resolve().parents[2]
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
        self.port = wait_port_file(self.port_file, self.proc)
        self.base_url = f"http://127.0.0.1:{self.port}"

    def truth_rows(self) -> list[dict]:
        """Every ground-truth line, the probe's (no request id) included."""
        return [json.loads(x) for x in self.ground_truth.read_text().splitlines() if x.strip()]

    def truth(self) -> dict[str, dict]:
        """Ground truth by request id (the run's requests only)."""
        return {r["request_id"]: r for r in self.truth_rows() if r["request_id"]}

    def stop(self) -> None:
        stop_process(self.proc)


def run_cli(args: list[str], timeout: float = 60,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    extra = env or {}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with contextlib.suppress(KeyError):
        del env["SERVINGBENCH_TEST_KEY"]
    env.update(extra)
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "load", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)
