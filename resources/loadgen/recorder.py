"""Incremental, crash-safe record writing (contract §2.2/§2.3, §6).

Finished requests are buffered in memory and appended as Arrow IPC stream batches to
`<name>.partial.arrows` at least every `flush_s` seconds, so a `kill -9` loses at most
the last interval. `finalize()` turns each stream into `<name>.parquet` (atomically) and
removes the stream. Times arrive as perf_counter ns and are mapped to UTC here.

A flush on the event loop only swaps the buffers (microseconds); the Arrow build and the
IPC write run on the recorder's writer thread, one flush after the other in the order they
were handed over, so the loop is not held while batches are built and written.
`flush(wait=False)` is the run's periodic flush; `flush()` waits for everything handed over
so far to be on disk (the run's end, a step boundary, `finalize()`), and either raises what
the writer met (DiskFullError once, as before; any other error each time).

One worker of several (`worker="w1"`) writes its own shard files `<name>.w1.partial.arrows`
→ `<name>.w1.parquet` (contract §6) and sets the `worker` column on every row; the run
merges the shards afterwards (shards.py).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import deque
from pathlib import Path

import pyarrow as pa
from servingbench.resources.contract import durable
from servingbench.resources.contract.schemas import (
    PARTIAL_SUFFIX,
    RECORD_SETS,
    REQUEST_LOG,
    SchemaError,
    read_partial_stream,
    shard_paths,
    write_parquet,
)
from servingbench.resources.loadgen.clock import Clock
from servingbench.resources.loadgen.errors import DiskFullError, RunExistsError
from servingbench.resources.loadgen.record_streams import ChunkStream, Stream, fits, unrecordable
from servingbench.resources.loadgen.records import Request

NAMES = RECORD_SETS


def refuse_existing(run_dir: Path, worker: str | None = None) -> None:
    """Raise RunExistsError when `run_dir` holds request logs (final or partial), or, for
    one worker, that worker's shards."""
    found = existing_logs(run_dir, worker)
    if found:
        raise RunExistsError(f"{run_dir} already holds request logs ({found[0].name}); "
                             "a run is never overwritten: choose a new run folder")


def stem(name: str, worker: str | None) -> str:
    """`chunk_log`, or a worker's shard `chunk_log.w1` (contract §6)."""
    return name if worker is None else f"{name}.{worker}"


def existing_logs(run_dir: Path, worker: str | None = None) -> list[Path]:
    """The record files already in `run_dir`: merged files, and every shard (a run) or
    the worker's own shards (one worker: the others write beside it)."""
    found = []
    for name in NAMES:
        for suffix in (".parquet", PARTIAL_SUFFIX):
            for s in {name, stem(name, worker)}:
                p = run_dir / f"{s}{suffix}"
                if p.exists():
                    found.append(p)
        if worker is None:
            try:
                found += shard_paths(run_dir, name)
            except SchemaError:
                found.append(run_dir / name)
    return found


class Recorder:
    def __init__(self, run_dir: Path, run_id: str, clock: Clock, worker: str | None = None) -> None:
        refuse_existing(run_dir, worker)
        run_dir.mkdir(parents=True, exist_ok=True)
        # Arrow loads its time-zone data on first use (about a CPU-second): pay it now,
        # before any request is timed, not in the middle of the first step.
        pa.array([0], REQUEST_LOG.field("sent_at").type)
        self.run_dir, self.run_id, self.clock, self.worker = run_dir, run_id, clock, worker
        self.streams = {
            "warmup_log": Stream(run_dir / f"{stem('warmup_log', worker)}{PARTIAL_SUFFIX}",
                                  REQUEST_LOG, clock.offset_ns),
            "steady_state_request_log": Stream(
                run_dir / f"{stem('steady_state_request_log', worker)}{PARTIAL_SUFFIX}", REQUEST_LOG,
                clock.offset_ns),
            "chunk_log": ChunkStream(run_dir / f"{stem('chunk_log', worker)}{PARTIAL_SUFFIX}", run_id,
                                      clock.offset_ns),
        }
        self.counts = dict.fromkeys(NAMES, 0)
        # space for the final manifest should the disk fill up (given back at the end)
        self.reserve = durable.Reserve(run_dir)
        self.full: DiskFullError | None = None
        self.cut_back = dict.fromkeys(NAMES, 0)  # rows removed again from a failed flush
        self.lost = dict.fromkeys(NAMES, 0)  # rows handed to the writer that it never wrote
        self.error: BaseException | None = None  # what stopped the writer, if not a full disk
        self._reported = False  # the full disk was raised once (later flushes are no-ops)
        self._jobs: queue.Queue = queue.Queue()
        self._writer: threading.Thread | None = None
        self._later: deque[Request] = deque()  # finished requests whose rows are not built yet

    def add_later(self, req: Request) -> None:
        """`add`, deferred: the row is built by `settle` (the loop's low-priority pump) or, at
        the latest, by the next flush. A request is final when it is recorded: nothing
        changes it afterwards."""
        self._later.append(req)

    def settle(self, budget_ns: int | None = None) -> bool:
        """Add the deferred requests, all of them or (`budget_ns`) for about that long;
        True when some are still waiting."""
        later = self._later
        stop = None if budget_ns is None else time.perf_counter_ns() + budget_ns
        while later:
            self.add(later.popleft())
            if stop is not None and time.perf_counter_ns() >= stop:
                break
        return bool(later)

    def add(self, req: Request) -> None:
        name = "warmup_log" if req.phase == "warmup" else "steady_state_request_log"
        at = req.chunk_at
        ok = req.status == "ok"
        row = {
            "run_id": self.run_id, "request_id": req.request_id, "phase": req.phase,
            "step": req.step, "load_mode": req.load_mode, "target": float(req.target),
            "scheduled_at": req.scheduled, "sent_at": req.sent,
            "first_token_at": at[0] if at else None, "last_token_at": at[-1] if at else None,
            "finished_at": req.finished, "input_tokens": req.input_tokens,
            "output_tokens": req.output_tokens, "output_tokens_source": req.output_tokens_source,
            "chunks": len(at), "status": req.status, "http_status": req.http_status,
            "error": None if ok else req.error, "worker": self.worker,
            "session_id": req.session_id, "turn": req.turn, "cached_tokens": req.cached_tokens,
            "reasoning_tokens": req.reasoning_tokens_total, "first_answer_at": req.first_answer_at,
            "input_images": req.input_images, "replica": req.replica,
            # contract §2.2's optional model and retry_of: filled by a request that carries them
            "model": getattr(req, "model", None), "retry_of": getattr(req, "retry_of", None),
        }
        if not fits(row):
            row = unrecordable(row, ValueError("a value outside its column's type"))
        elif at:
            # chunks first, all or nothing: should they not fit, the row says why
            try:
                self.streams["chunk_log"].add(req.request_id, at, req.chunk_tokens,
                                              req.chunk_reasoning)
                self.counts["chunk_log"] += len(at)
            except (OverflowError, TypeError, ValueError) as exc:
                row = unrecordable(row, exc)
        self.streams[name].add(row)
        self.counts[name] += 1

    def flush(self, wait: bool = True) -> None:
        """Hand what finished since the last flush to the writer thread; with `wait`, return
        once everything handed over so far is written. On a full disk: DiskFullError (from
        this call, or from the first one after the writer met it), the streams end after
        their last complete batch, and every later flush is a no-op."""
        self.settle()
        self._report()
        if self.full is not None:
            return
        job = []
        # Chunks first: a request row on disk always has its chunks on disk before it.
        for name in sorted(NAMES, key=lambda n: n != "chunk_log"):
            taken = self.streams[name].take()
            if taken is not None:
                job.append((name, *taken))
        if job:
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_jobs, daemon=True,
                                                name=f"recorder-{self.worker or 'run'}")
                self._writer.start()
            self._jobs.put(job)
        if wait:
            self._jobs.join()
            self._report()

    def _report(self) -> None:
        if self.error is not None:
            raise self.error
        if self.full is not None and not self._reported:
            self._reported = True
            raise self.full

    def _write_jobs(self) -> None:
        """The writer thread: one job (one flush's rows of every stream) after the other."""
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                self._write(job)
            finally:
                self._jobs.task_done()

    def _write(self, job: list[tuple[str, int, object]]) -> None:
        # A flush is all or nothing across the streams: should one fail, those already
        # appended in this round are cut back too, so no chunk is ever left on disk without
        # its request row.
        if self.full is not None or self.error is not None:
            for name, rows, _ in job:
                self.lost[name] += rows
            return
        marks = {name: s.sink.good for name, s in self.streams.items()}
        done: dict[str, int] = {}
        for k, (name, rows, taken) in enumerate(job):
            try:
                self.streams[name].write(taken)
            except BaseException as exc:  # noqa: BLE001 - kept, and raised on the loop's side
                for later, n, _ in job[k:]:
                    self.lost[later] += n
                if isinstance(exc, OSError) and durable.is_disk_full(exc):
                    for back, n in done.items():
                        self.streams[back].sink.cut(marks[back])
                        self.cut_back[back] += n
                    self.stop(self.streams[name].path, exc)
                else:
                    self.error = exc
                return
            done[name] = rows

    def close_writer(self) -> None:
        """Wait for what was handed over, then end the writer thread."""
        if self._writer is not None:
            self._jobs.put(None)
            self._writer.join()
            self._writer = None

    def stop(self, path: Path, exc: OSError) -> DiskFullError:
        """Stop recording because writing `path` hit a full disk; give back the reserve so
        the manifest can still be written. Returns the error to raise."""
        if self.full is None:
            self.full = DiskFullError(path, exc.strerror or str(exc))
            self.reserve.release()
        return self.full

    def finalize(self) -> dict[str, Path]:
        """Flush, close, and turn every stream into parquet; returns the parquet paths.

        After a full disk the streams are closed and kept as they are (their complete
        batches are the run's records) and DiskFullError is raised, saying how many
        finished records could not be written."""
        try:
            self.flush()
        except DiskFullError:
            pass
        finally:
            self.close_writer()
        for s in self.streams.values():
            if self.full is not None:
                s.abandon()
                continue
            try:
                s.close()
            except OSError as exc:  # the end-of-stream marker did not fit: cut back
                if not durable.is_disk_full(exc):
                    raise
                self.stop(s.path, exc)
        if self.full is None:
            out = self._to_parquet()
            if out is not None:
                self.reserve.release()
                return out
        self.full.unwritten = {n: s.pending() + self.cut_back[n] + self.lost[n]
                               for n, s in self.streams.items()}
        self.full.kept = {n: self.counts[n] - self.full.unwritten[n] for n in NAMES}
        raise self.full

    def _to_parquet(self) -> dict[str, Path] | None:
        out = {}
        for name, s in self.streams.items():
            final = self.run_dir / f"{stem(name, self.worker)}.parquet"
            try:
                write_parquet(read_partial_stream(s.path), final)
            except OSError as exc:
                if not durable.is_disk_full(exc):
                    raise
                self.stop(final, exc)  # this stream and the ones after it stay as they are
                return None
            os.remove(s.path)
            out[name] = final
        return out
