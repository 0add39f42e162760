"""Ground-truth log: one JSON line per finished request, flushed at once.

{"completion_id", "request_id", "arrival_ns", "headers_ns", "prompt_tokens",
 "completion_tokens", "status", "chunks": [[scheduled_ns, written_ns, tokens], ...]}
Times are UTC epoch ns on the server clock: a `time.time_ns()` anchor taken once
plus `perf_counter_ns()` deltas, so intervals never jump with the wall clock.
`status` is the HTTP status sent (200 also for streams cut by a fault; the fault
header says which); `written_ns − scheduled_ns` is the server's own write lag.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO


class Clock:
    def __init__(self) -> None:
        self.wall_anchor = time.time_ns()
        self.perf_anchor = time.perf_counter_ns()

    def wall(self, perf_ns: int) -> int:
        return self.wall_anchor + (perf_ns - self.perf_anchor)

    def now_wall(self) -> int:
        return self.wall(time.perf_counter_ns())


class GroundTruth:
    def __init__(self, path: Path | None):
        self.fh: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.fh = path.open("a", encoding="utf-8")

    @property
    def enabled(self) -> bool:
        return self.fh is not None

    def write(self, record: dict) -> None:
        if self.fh is not None:
            self.fh.write(json.dumps(record, separators=(",", ":")) + "\n")
            self.fh.flush()

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None


def format_ts(ns: int) -> str:
    """Integer ns since the epoch as the contract's RFC 3339 text (`...SS.nnnnnnnnnZ`). The
    emulator keeps its own copy: it is self-contained and imports nothing of servingbench."""
    secs, frac = divmod(int(ns), 1_000_000_000)
    return datetime.fromtimestamp(secs, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}Z"


def read(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
