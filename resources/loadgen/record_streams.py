"""The streams a run's records are appended to (recorder.py hands them rows): one Arrow IPC
stream file per record set, `<name>.partial.arrows`, written a batch at a time on the
recorder's writer thread, and the check that a row's values fit their columns (a value that
does not is recorded as an unrecordable answer, never dropped). Times arrive as
perf_counter ns and are mapped to UTC here by the run's offset."""

from __future__ import annotations

from array import array
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
from servingbench.resources.contract import durable
from servingbench.resources.contract.schemas import CHUNK_LOG
from servingbench.resources.loadgen.errors import RunExistsError

_TS_COLS = ("scheduled_at", "sent_at", "first_token_at", "last_token_at", "finished_at",
            "first_answer_at")
_AT_TYPE = CHUNK_LOG.field("at").type
_I64_TYPE = pa.int64()


def _create(path: Path) -> durable.AppendFile:
    """A new stream file, created exclusively: an existing file (or a planted symlink) under
    the name means another run owns it, and it is never truncated or followed. A flush that
    fails (a full disk) leaves the file ending after the last complete batch."""
    try:
        return durable.create_stream(path)
    except FileExistsError:
        raise RunExistsError(f"{path} already exists; a run is never overwritten: "
                             "choose a new run folder") from None


class StreamFile:
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


class Stream(StreamFile):
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


class ChunkStream(StreamFile):
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


def fits(row: dict) -> bool:
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
