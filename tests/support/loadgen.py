"""What the load generator's tests share: configs, record readers, and the `servingbench load`
command as a subprocess (the server they load is tests/support/emulator.FixedTimingServer)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
from servingbench.resources.contract.schemas import read_records
from servingbench.resources.loadgen import LoadConfig

from tests.support.emulator import FIXED_MODEL


def config(base_url: str, **kw) -> LoadConfig:
    args = dict(endpoint=base_url, model=FIXED_MODEL, concurrency=[2], requests_per_step=6,
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


ROOT = Path(__file__).resolve().parents[2]


def run_cli(args: list[str], timeout: float = 60,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    extra = env or {}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with contextlib.suppress(KeyError):
        del env["SERVINGBENCH_TEST_KEY"]
    env.update(extra)
    return subprocess.run([sys.executable, "-m", "servingbench.pipelines.cli", "load", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)
