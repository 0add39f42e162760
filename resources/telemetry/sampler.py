"""The sampler: a background thread that reads every source at a fixed interval and
appends the rows to `telemetry.partial.arrows` (one Arrow IPC batch per tick, so a killed
run keeps what was sampled); `stop()` turns the stream into `telemetry.parquet`.

Ticks are on a fixed grid (`start + k × interval`, never "interval after the previous
read"), so a slow read shifts nothing after it; a tick missed because a read overran is
skipped, not caught up. A source that fails (timeout, HTTP error, garbage, a dead process)
gives one `sample_error` row for that tick and is read again at the next one: sampling
never stops a run. Times come from one perf_counter clock mapped to UTC once (contract §2).

`stop()` is bounded (`STOP_TIMEOUT_S`): teardown of the engine and the nodes waits on it,
and paid nodes must not outlive the load because an exporter misbehaves in a way no read
bound catches (headers trickled byte by byte). A loop that does not finish in time is
abandoned: it can write nothing more, and the file keeps every tick written until then.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
from servingbench.resources.contract.schemas import (
    PARTIAL_SUFFIX,
    TELEMETRY,
    read_partial_stream,
    write_parquet,
)
from servingbench.resources.telemetry import sources

NAME = "telemetry"
_USERINFO = re.compile(r"//[^/@\s]+@")  # credentials in a URL never reach a log
DEFAULT_INTERVAL_S = 1.0
# the loop's closing tick reads every source once more, each bounded by its own deadline
# (0.8 s by default); past this the loop is abandoned
STOP_TIMEOUT_S = 5.0


def sources_from(specs: list[dict], timeout_s: float | None = None) -> list:
    """Build sources from a deployment's plain descriptions (`Deployment.telemetry`):
    `{"kind": <a kind of sources/>, "url": …}` or `{"kind": "host", "pid": …}`."""
    return sources.build(specs, timeout_s)


def _batch(cols: dict[str, list]) -> pa.RecordBatch:
    arrays = [pa.array(cols[f.name], pa.int64()).cast(f.type) if f.name == "at"
              else pa.array(cols[f.name], f.type) for f in TELEMETRY]
    return pa.RecordBatch.from_arrays(arrays, schema=TELEMETRY)


class Sampler:
    def __init__(self, run_dir: Path, run_id: str, sources: list,
                 interval_s: float = DEFAULT_INTERVAL_S):
        if not interval_s > 0:
            raise ValueError(f"telemetry interval {interval_s!r}: expected a positive number of seconds")
        self.run_dir, self.run_id, self.sources = Path(run_dir), run_id, list(sources)
        self.interval_ns = int(interval_s * 1e9)
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None
        self.ticks = self.errors = self.rows = 0
        self.last_error: str | None = None
        self.write_failed = False
        self.abandoned = False
        self.lock = threading.Lock()  # the writer: the loop's ticks against stop()'s close
        perf0, utc, perf1 = time.perf_counter_ns(), time.time_ns(), time.perf_counter_ns()
        self.offset_ns = utc - (perf0 + perf1) // 2
        self.partial = self.run_dir / f"{NAME}{PARTIAL_SUFFIX}"

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Sampler:
        # Arrow's first tz-aware conversion loads its kernels (seconds on a busy host): pay
        # it here, before the load starts, rather than inside the first tick.
        _batch({n: [0] if n == "at" else [None] for n in TELEMETRY.names})
        # exclusively: a second sampler of the same run must fail, not truncate the first's
        self.sink = pa.PythonFile(open(self.partial, "xb"), mode="w")  # noqa: SIM115
        self.writer = ipc.new_stream(self.sink, TELEMETRY)
        self.thread = threading.Thread(target=self._loop, name="telemetry-sampler", daemon=True)
        self.thread.start()
        return self

    def stop(self, timeout_s: float | None = None) -> Path | None:
        """Stop after the current tick (at most `timeout_s`, default STOP_TIMEOUT_S), write
        telemetry.parquet, return its path. A loop still reading after `timeout_s` is left
        behind, writing nothing."""
        if self.thread is None:
            return None
        if timeout_s is None:  # read at the call: a test of the whole chain may shorten it
            timeout_s = STOP_TIMEOUT_S
        self.stop_event.set()
        self.thread.join(timeout_s)
        with self.lock:
            if self.thread.is_alive():
                self.abandoned = True
                self.last_error = (f"sampler stopped after {timeout_s:g} s with a read still "
                                   "running: its tick is not recorded")
            self.thread = None
            self.writer.close()
            self.sink.close()
        if not self.abandoned:  # an abandoned loop may still be using its clients
            for s in self.sources:
                s.close()
        final = self.run_dir / f"{NAME}.parquet"
        write_parquet(read_partial_stream(self.partial), final)
        self.partial.unlink()
        return final

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- the loop ----------------------------------------------------------------------------
    def _loop(self) -> None:
        start = time.perf_counter_ns()
        k = 0
        while not self.stop_event.is_set():
            self.tick()
            k = max(k + 1, (time.perf_counter_ns() - start) // self.interval_ns + 1)
            wait = (start + k * self.interval_ns - time.perf_counter_ns()) / 1e9
            if self.stop_event.wait(max(wait, 0.0)):
                break
        self.tick()  # the closing sample: the last step's window ends inside it

    def tick(self) -> None:
        if self.abandoned:  # stop() has closed the file and gone on: read nothing more
            return
        cols: dict[str, list] = {n: [] for n in TELEMETRY.names}
        for src in self.sources:
            at = time.perf_counter_ns() + self.offset_ns
            try:
                got = src.sample()
            except Exception as exc:  # any failure is a recorded gap, never the run's end
                self.errors += 1
                self.last_error = _USERINFO.sub("//***@", f"{src.source}: {type(exc).__name__}: "
                                                          f"{str(exc)[:200]}")
                got = [(src.error_device, "sample_error", None)]
            for device, metric, value in got:
                cols["run_id"].append(self.run_id)
                cols["at"].append(at)
                cols["source"].append(src.source)
                cols["device"].append(device)
                cols["metric"].append(metric)
                cols["value"].append(value)
        with self.lock:
            if self.abandoned:  # stop() has closed the file and gone on
                return
            self.ticks += 1
            if cols["run_id"] and not self.write_failed:
                try:
                    self.writer.write_batch(_batch(cols))
                    self.sink.flush()
                    self.rows += len(cols["run_id"])
                except OSError as exc:  # a full disk ends the sampling, not the run
                    self.write_failed = True
                    self.last_error = f"writing {self.partial}: {exc}"

    def summary(self) -> dict:
        return {"ticks": self.ticks, "rows": self.rows, "sample_errors": self.errors,
                "last_error": self.last_error, "interval_s": self.interval_ns / 1e9,
                "sources": sorted({s.source for s in self.sources})}
