"""The recorder's writer thread: a flush on the event loop only hands the buffers over; the
batches are built and written on the writer thread, in order, all or nothing per flush, a
full disk still stops the recording with the earlier batches readable, and the run's end
waits for the last one."""

from __future__ import annotations

import errno
import threading

import pytest
from servingbench.resources.contract.schemas import (
    PARTIAL_SUFFIX,
    read_partial_stream,
    read_records,
)
from servingbench.resources.loadgen.clock import Clock
from servingbench.resources.loadgen.errors import DiskFullError
from servingbench.resources.loadgen.record_streams import ChunkStream as _ChunkStream
from servingbench.resources.loadgen.record_streams import Stream as _Stream
from servingbench.resources.loadgen.recorder import Recorder
from servingbench.resources.loadgen.records import Request


def _req(rid: str, chunks: int = 3, phase: str = "steady") -> Request:
    r = Request(rid, phase, "c=1", "concurrency", 1.0, 1_000)
    r.sent, r.finished, r.status, r.http_status = 1_000, 90_000, "ok", 200
    r.chunk_at = [2_000 + 1_000 * k for k in range(chunks)]
    r.chunk_tokens = [1] * chunks
    r.usage_total = r.usage_cum = chunks
    return r


def test_batches_are_built_and_written_on_the_writer_thread_in_order(tmp_path, monkeypatch):
    seen: list[tuple[str, str]] = []
    for cls in (_Stream, _ChunkStream):
        real = cls.write

        def spy(self, taken, real=real):
            seen.append((self.path.name, threading.current_thread().name))
            return real(self, taken)
        monkeypatch.setattr(cls, "write", spy)
    rec = Recorder(tmp_path / "run", "run-1", Clock.start())
    ids = []
    for k in range(40):
        ids.append(f"r{k:02d}")
        rec.add(_req(ids[-1], chunks=1 + k % 4))
        if k % 3 == 2:
            rec.flush(wait=False)  # the loop's periodic flush: returns before the write
    rec.flush()  # the run's end: everything handed over is on disk when it returns
    partial = read_partial_stream(tmp_path / "run" / f"steady_state_request_log{PARTIAL_SUFFIX}")
    assert partial.column("request_id").to_pylist() == ids
    assert {t for _, t in seen} == {"recorder-run"}  # never the caller's thread
    assert threading.current_thread().name not in {t for _, t in seen}
    # each flush writes the chunks before the request rows they belong to
    names = [n for n, _ in seen]
    assert names[0].startswith("chunk_log") and names[1].startswith("steady_state_request_log")
    rec.finalize()
    chunks = read_records(tmp_path / "run", "chunk_log").to_pylist()
    assert [c["request_id"] for c in chunks] == [i for k, i in enumerate(ids) for _ in range(1 + k % 4)]
    assert [c["seq"] for c in chunks[:3]] == [0, 0, 1]
    offset = Clock.start().offset_ns  # the run's own clock: same anchor to within the drift
    assert abs(chunks[0]["at"].value - (2_000 + offset)) < 10**9


def test_a_full_disk_met_by_the_writer_stops_recording_and_keeps_what_was_written(tmp_path):
    run_dir = tmp_path / "run"
    rec = Recorder(run_dir, "run-1", Clock.start())
    rec.add(_req("kept"))
    rec.flush(wait=False)
    rec.flush()  # written (nothing new: only waits)
    sink = rec.streams["steady_state_request_log"].sink

    def full() -> None:
        if sink.buf:  # nothing to write (the close after the stop) succeeds
            sink.rollback()  # what AppendFile does on a failed write
            raise OSError(errno.ENOSPC, "No space left on device")
    sink.flush = full
    rec.add(_req("lost-1"))
    rec.flush(wait=False)  # the writer meets the full disk; this call does not wait for it
    rec.add(_req("lost-2", chunks=2))
    with pytest.raises(DiskFullError):
        rec.flush()  # said once, by the first flush after the writer met it ...
    rec.add(_req("lost-3", chunks=1))
    rec.flush()  # ... later ones are no-ops
    with pytest.raises(DiskFullError) as exc:
        rec.finalize()
    assert exc.value.unwritten["steady_state_request_log"] == 3
    assert exc.value.unwritten["chunk_log"] == 3 + 2 + 1  # lost-1's were cut back again
    assert exc.value.kept["steady_state_request_log"] == 1 and exc.value.kept["chunk_log"] == 3
    steady = read_records(run_dir, "steady_state_request_log")
    chunks = read_records(run_dir, "chunk_log")
    assert steady.column("request_id").to_pylist() == ["kept"]
    assert chunks.column("request_id").to_pylist() == ["kept"] * 3


def test_an_error_in_the_writer_is_raised_on_the_callers_side(tmp_path, monkeypatch):
    rec = Recorder(tmp_path / "run", "run-1", Clock.start())

    def broken(self, taken):
        raise RuntimeError("a defect in the build")
    monkeypatch.setattr(_ChunkStream, "write", broken)
    rec.add(_req("a"))
    rec.flush(wait=False)
    with pytest.raises(RuntimeError, match="a defect"):
        rec.flush()
    with pytest.raises(RuntimeError, match="a defect"):
        rec.flush()  # every time: the records are not being written
    rec.close_writer()


def test_a_crash_after_a_flush_leaves_the_rows_readable(tmp_path):
    rec = Recorder(tmp_path / "run", "run-1", Clock.start())
    for k in range(5):
        rec.add(_req(f"r{k}"))
    rec.flush()
    rec.add(_req("never-flushed"))
    # no finalize (the process dies here): the streams hold every flushed row
    steady = read_partial_stream(tmp_path / "run" / f"steady_state_request_log{PARTIAL_SUFFIX}")
    chunks = read_partial_stream(tmp_path / "run" / f"chunk_log{PARTIAL_SUFFIX}")
    assert steady.column("request_id").to_pylist() == [f"r{k}" for k in range(5)]
    assert chunks.num_rows == 15
    rec.close_writer()


def test_a_chunk_time_that_would_leave_int64_once_in_utc_is_kept_as_a_protocol_error(tmp_path):
    rec = Recorder(tmp_path / "run", "run-1", Clock.start())
    bad = _req("bad", chunks=2)
    bad.chunk_at = [2_000, (1 << 63) - 10]  # fits int64 as perf ns, not shifted to UTC
    rec.add(_req("good"))
    rec.add(bad)
    rec.add(_req("after"))
    rec.finalize()
    steady = {r["request_id"]: r for r in read_records(tmp_path / "run", "steady_state_request_log").to_pylist()}
    assert steady["bad"]["status"] == "protocol_error" and "unrecordable" in steady["bad"]["error"]
    assert steady["good"]["status"] == steady["after"]["status"] == "ok"
    chunks = read_records(tmp_path / "run", "chunk_log").column("request_id").to_pylist()
    assert chunks == ["good"] * 3 + ["after"] * 3


def test_deferred_rows_are_built_in_order_by_settle_or_at_the_latest_by_the_next_flush(tmp_path):
    """The loop's closed-loop requests are recorded with `add_later`: their rows are built a
    slice at a time (`settle` with a budget) after the burst of sends, and a flush never
    leaves one behind, interleaved with direct adds in the order they came."""
    rec = Recorder(tmp_path / "run", "run-1", Clock.start())
    for k in range(5):
        rec.add_later(_req(f"a{k}", chunks=2))
    assert rec.counts["steady_state_request_log"] == 0  # nothing built yet
    assert rec.settle(budget_ns=0) is True  # one row a slice at the least, the rest wait
    assert rec.counts["steady_state_request_log"] == 1 and rec.counts["chunk_log"] == 2
    rec.add_later(_req("b0", chunks=1))
    rec.flush()  # the flush builds every deferred row before it hands the rows over
    assert rec.settle(budget_ns=0) is False
    rec.add(_req("c0"))
    rec.finalize()
    rows = read_records(tmp_path / "run", "steady_state_request_log").column("request_id").to_pylist()
    assert rows == ["a0", "a1", "a2", "a3", "a4", "b0", "c0"]
    chunks = read_records(tmp_path / "run", "chunk_log")
    assert chunks.column("request_id").to_pylist() == ["a0", "a0", "a1", "a1", "a2", "a2", "a3",
                                                      "a3", "a4", "a4", "b0", "c0", "c0", "c0"]
    assert chunks.column("seq").to_pylist() == [0, 1] * 5 + [0, 0, 1, 2]
