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
from array import array
from collections import deque
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
from servingbench.resources.contract import durable
from servingbench.resources.contract.schemas import (
    CHUNK_LOG,
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
from servingbench.resources.loadgen.records import Request

NAMES = RECORD_SETS
_TS_COLS = ("scheduled_at", "sent_at", "first_token_at", "last_token_at", "finished_at",
            "first_answer_at")
_AT_TYPE = CHUNK_LOG.field("at").type
_I64_TYPE = pa.int64()


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


def _create(path: Path) -> durable.AppendFile:
    """A new stream file, created exclusively: an existing file (or a planted symlink) under
    the name means another run owns it, and it is never truncated or followed. A flush that
    fails (a full disk) leaves the file ending after the last complete batch."""
    try:
        return durable.create_stream(path)
    except FileExistsError:
        raise RunExistsError(f"{path} already exists; a run is never overwritten: "
                             "choose a new run folder") from None


class _StreamFile:
    """One record stream on disk, appended a batch per flush; how it ends is shared."""

    def __init__(self, path: Path, schema: pa.Schema, offset_ns: int) -> None:
        self.path, self.schema, self.offset_ns = path, schema, offset_ns  # offset: perf → UTC
        self.sink = _create(path)
        self.writer = ipc.new_stream(self.sink, schema)

    def close(self) -> None:
        try:
            self.writer.close()
        finally:
            self.sink.close()

    def abandon(self) -> None:
        """Close without another byte: the file keeps its complete batches (an end-of-stream
        marker is optional for a reader; a stream whose schema never reached the disk
        stays empty, which reads as no records)."""
        self.sink.rollback()
        self.sink.close()


class _Stream(_StreamFile):
    def __init__(self, path: Path, schema: pa.Schema, offset_ns: int) -> None:
        super().__init__(path, schema, offset_ns)
        self.cols: dict[str, list] = {n: [] for n in schema.names}

    def add(self, row: dict) -> None:
        for k, v in row.items():
            self.cols[k].append(v)

    def take(self) -> tuple[int, dict[str, list]] | None:
        """The rows added since the last take, handed over (the loop's side of a flush)."""
        n = len(self.cols[self.schema.names[0]])
        if not n:
            return None
        cols, self.cols = self.cols, {k: [] for k in self.schema.names}
        return n, cols

    def write(self, taken: dict[str, list]) -> None:
        """Build and append one batch (the writer thread's side)."""
        try:
            batch = self._batch(taken)
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            # Rows are checked before they are added, so this is a defect; still, the
            # rows that can be written are, and none stays behind to fail every later flush.
            batch = self._batch(self._salvage(taken))
        self.writer.write_batch(batch)
        self.sink.flush()

    def _batch(self, cols: dict[str, list]) -> pa.RecordBatch:
        # Times are shifted to UTC in Python and built straight as timestamps (a compute
        # call costs ~50 µs per column, five times the conversion of a flush's rows).
        arrays = []
        for f in self.schema:
            values = cols[f.name]
            if f.name in _TS_COLS:
                values = [None if v is None else v + self.offset_ns for v in values]
            arrays.append(pa.array(values, f.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _salvage(self, cols: dict[str, list]) -> dict[str, list]:
        out: dict[str, list] = {k: [] for k in self.schema.names}
        for vals in zip(*cols.values(), strict=True):
            row = dict(zip(cols, vals, strict=True))
            try:
                pa.RecordBatch.from_pylist([row], schema=self.schema)
            except (pa.ArrowException, OverflowError, TypeError, ValueError) as exc:
                row = unrecordable(row, exc)
            for k, v in row.items():
                out[k].append(v)
        return out

    def pending(self) -> int:
        return len(self.cols[self.schema.names[0]])


class _ChunkStream(_StreamFile):
    """The chunk log, the bulk of the data: typed buffers filled as each request is added
    (times as perf ns, a C-level copy of the request's list: no Python step per chunk),
    turned into Arrow without a per-value conversion; the shift to UTC is one compute call
    per flush, on the writer thread. `add` runs on the loop between a request's end and the
    next one's send, 256 of them back to back when a closed-loop round ends together, so
    it does no Python-level work per chunk: the sequence numbers are a slice of a shared
    range, and a chunk's request id is an index into the flush's ids (expanded on the
    writer thread)."""

    def __init__(self, path: Path, run_id: str, offset_ns: int) -> None:
        super().__init__(path, CHUNK_LOG, offset_ns)
        self.run_id = run_id
        self._clear()

    def _clear(self) -> None:
        self.at, self.tokens, self.seq = array("q"), array("q"), array("q")
        self.rids: list[str] = []  # the requests' ids, in order
        self.ridx = array("i")  # per chunk: its request's index in `rids`
        # one byte per chunk, an index into _KINDS: 0 (null) for a request that streamed no
        # reasoning, so a run without reasoning writes an all-null `kind` for free
        self.kind = bytearray()

    def add(self, request_id: str, at: list[int], tokens: list[int],
            reasoning: bytearray | None = None) -> None:
        """`reasoning`: one byte per chunk, 1 for a reasoning chunk (contract §2.3 `kind`),
        or None when the request streamed none."""
        # Every typed array is built first (a value out of int64 range raises here, and so
        # does a time that would leave it once shifted to UTC), then all are appended: the
        # columns never end up with different lengths.
        n = len(at)
        if len(tokens) != n:
            raise ValueError(f"{n} chunk times but {len(tokens)} token counts")
        if reasoning is not None and len(reasoning) != n:
            raise ValueError(f"{n} chunk times but {len(reasoning)} chunk kinds")
        if not isinstance(request_id, str):
            raise TypeError(f"request id {request_id!r} is not a string")
        kinds = bytes(n) if reasoning is None else bytes(1 + (k != 0) for k in reasoning)
        new_at, new_tokens = array("q", at), array("q", tokens)
        # once shifted, a time leaves int64 on one side only (the offset's sign): one pass
        off = self.offset_ns
        if n and (max(at) > _I64[1] - off if off >= 0 else min(at) < _I64[0] - off):
            raise OverflowError("a chunk time outside the timestamp range once shifted to UTC")
        self.at += new_at
        self.tokens += new_tokens
        self.seq += _seq(n)
        self.ridx += array("i", (len(self.rids),)) * n
        self.rids.append(request_id)
        self.kind += kinds

    def take(self) -> tuple[int, tuple] | None:
        n = len(self.at)
        if not n:
            return None
        taken = (n, self.at, self.tokens, self.seq, self.rids, self.ridx, self.kind)
        self._clear()
        return n, taken

    def write(self, taken: tuple) -> None:
        """Build and append one batch from buffers the loop no longer touches."""
        n, at_perf, tokens, seq, rids, ridx, kinds = taken

        def ints(a: array) -> pa.Array:
            return pa.Array.from_buffers(_I64_TYPE, n, [None, pa.py_buffer(a)])
        at = pc.add(ints(at_perf), pa.scalar(self.offset_ns, _I64_TYPE)).view(_AT_TYPE)
        rid = pa.array(rids, pa.string()).take(pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(ridx)]))
        run = pa.repeat(pa.scalar(self.run_id, pa.string()), n)
        kind = (pa.array([_KINDS[k] for k in kinds], pa.string()) if any(kinds)
                else pa.nulls(n, pa.string()))
        batch = pa.RecordBatch.from_arrays([run, rid, ints(seq), at, ints(tokens), kind],
                                           schema=CHUNK_LOG)
        self.writer.write_batch(batch)
        self.sink.flush()

    def pending(self) -> int:
        return len(self.at)


_KINDS = (None, "answer", "reasoning")
_SEQ = array("q", range(1024))


def _seq(n: int) -> array:
    """0 … n−1 as int64, sliced from a shared range (grown when a request has more chunks)."""
    global _SEQ
    if n > len(_SEQ):
        _SEQ = array("q", range(max(n, 2 * len(_SEQ))))
    return _SEQ[:n]

_I64 = (-(1 << 63), (1 << 63) - 1)
_I32 = (-(1 << 31), (1 << 31) - 1)
_INTS = {"scheduled_at": _I64, "sent_at": _I64, "first_token_at": _I64, "last_token_at": _I64,
         "finished_at": _I64, "input_tokens": _I64, "output_tokens": _I64, "chunks": _I64,
         "http_status": _I32, "first_answer_at": _I64, "reasoning_tokens": _I64,
         "input_images": _I32}


def _fits(row: dict) -> bool:
    """Every integer inside its column's type (cheap: a few comparisons per request)."""
    for k, (lo, hi) in _INTS.items():
        v = row[k]
        if v is not None and (type(v) is not int or not lo <= v <= hi):
            return False
    return isinstance(row["error"], str | None) and isinstance(row["step"], str)


def unrecordable(row: dict, exc: BaseException) -> dict:
    """The row kept as a protocol_error with no counts, when a value cannot be stored."""
    out = dict(row)
    for k in ("first_token_at", "last_token_at", "input_tokens", "output_tokens",
              "first_answer_at", "reasoning_tokens"):
        out[k] = None
    for k in ("scheduled_at", "sent_at", "finished_at", "http_status"):
        lo, hi = _INTS[k]
        if out[k] is not None and (type(out[k]) is not int or not lo <= out[k] <= hi):
            out[k] = None
    for k in ("run_id", "request_id", "phase", "step", "load_mode"):
        if not isinstance(out[k], str):
            out[k] = str(out[k])
    try:
        out["target"] = float(out["target"])
    except (TypeError, ValueError):
        out["target"] = float("nan")
    out.update(chunks=0, status="protocol_error", output_tokens_source="chunks",
               error=f"unrecordable answer: {type(exc).__name__}: {str(exc)[:120]}")
    return out


class Recorder:
    def __init__(self, run_dir: Path, run_id: str, clock: Clock, worker: str | None = None) -> None:
        refuse_existing(run_dir, worker)
        run_dir.mkdir(parents=True, exist_ok=True)
        # Arrow loads its time-zone data on first use (about a CPU-second): pay it now,
        # before any request is timed, not in the middle of the first step.
        pa.array([0], REQUEST_LOG.field("sent_at").type)
        self.run_dir, self.run_id, self.clock, self.worker = run_dir, run_id, clock, worker
        self.streams = {
            "warmup_log": _Stream(run_dir / f"{stem('warmup_log', worker)}{PARTIAL_SUFFIX}",
                                  REQUEST_LOG, clock.offset_ns),
            "steady_state_request_log": _Stream(
                run_dir / f"{stem('steady_state_request_log', worker)}{PARTIAL_SUFFIX}", REQUEST_LOG,
                clock.offset_ns),
            "chunk_log": _ChunkStream(run_dir / f"{stem('chunk_log', worker)}{PARTIAL_SUFFIX}", run_id,
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
        if not _fits(row):
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
