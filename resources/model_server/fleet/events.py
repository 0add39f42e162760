"""`events.parquet` (contract §2.6): one row per event of a run (a replica requested, a phase
of its start-up ended, it joined the pool or stopped, a scale decision), written whole and
atomically after every event, so a run stopped at any point keeps every event before it.

Times are wall clock (ns since the epoch, UTC), the same clock the emulator stamps its
phases with and the load generator maps its monotonic clock to."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
from servingbench.resources.contract import run_files
from servingbench.resources.contract.schemas import EVENT_KINDS, EVENTS, write_parquet

FILE = run_files.EVENTS_FILE


class Events:
    """The run's events, thread-safe (replicas start on their own threads)."""

    def __init__(self, run_dir: Path | None, run_id: str) -> None:
        self.path = None if run_dir is None else Path(run_dir) / FILE
        self.run_id = run_id
        self.rows: list[dict] = []
        self._lock = threading.Lock()

    def add(self, kind: str, subject: str, at_ns: int | None = None, value: float | None = None,
            detail: str | None = None) -> dict:
        if kind not in EVENT_KINDS:
            raise ValueError(f"event kind {kind!r} is not one of {', '.join(EVENT_KINDS)}")
        row = {"run_id": self.run_id, "at": time.time_ns() if at_ns is None else int(at_ns),
               "kind": kind, "subject": subject,
               "value": None if value is None else float(value), "detail": detail}
        with self._lock:
            self.rows.append(row)
            self._write()
        return row

    def of(self, kind: str, subject: str | None = None) -> list[dict]:
        with self._lock:
            return [r for r in self.rows
                    if r["kind"] == kind and (subject is None or r["subject"] == subject)]

    def _write(self) -> None:
        if self.path is None:
            return
        rows = sorted(self.rows, key=lambda r: r["at"])
        table = pa.Table.from_pylist(rows, schema=EVENTS)
        write_parquet(table, self.path)
