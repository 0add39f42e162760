"""Small helpers shared by the load generator's tests."""

from __future__ import annotations

import uuid

import pyarrow as pa

from resources.analysis.schemas import read_records
from resources.loadgen import LoadConfig


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
