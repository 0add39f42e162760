"""The one writer of the run folder a peer's result becomes (contract §6): the request and chunk
logs of a `PeerRun` (records.py), checked, in bounded memory (the chunk log a row group at a
time), and its manifest; `servingbench import` and the import job both write through it.
"""

from __future__ import annotations

from array import array
from itertools import chain, repeat
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from servingbench.resources.contract import durable, yamltext
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.redact import short_error
from servingbench.resources.contract.schemas import CHUNK_LOG, REQUEST_LOG, STATUSES, write_parquet
from servingbench.resources.peers.records import (
    CHUNK_TIMES,
    TOKEN_COUNTS,
    PeerFileError,
    PeerRequest,
    PeerRun,
    disagreements,
    sha256,
    short,
)

# --- the run folder --------------------------------------------------------------------------

def source_of(run: PeerRun, r: PeerRequest) -> str:
    """The request log's `output_tokens_source` of an imported request (docs/import.md):
    `itl` when its chunk times were rebuilt from the peer's inter-token latencies;
    `first_last` when the peer kept only the first and last token times; `usage`
    when the count is the server's and the chunk log's tokens add up to it (rule 4 then
    checks it, as for servingbench's own runs); else `peer`: the peer's count, with chunk
    tokens the peer did not keep."""
    if run.chunk_times == "reconstructed_from_itl":
        return "itl"
    if run.chunk_times == "first_and_last":
        return "first_last"
    chunk_sum = sum(r.chunk_tokens) if r.chunk_tokens else len(r.chunk_ns or ())
    if run.output_tokens == "usage" and (r.output_tokens is None or r.output_tokens == chunk_sum):
        return "usage"
    return "peer"


def _check(run: PeerRun) -> None:
    seen: set = set()
    for r in run.requests:  # one pass: `ids.count` per id was quadratic
        if r.request_id in seen:
            raise PeerFileError(f"{run.files[0]}: request id {short(r.request_id)} appears twice")
        seen.add(r.request_id)
    for r in run.requests:
        if r.status not in STATUSES:
            raise PeerFileError(f"{run.files[0]}: request {short(r.request_id)}: status "
                                f"{short(r.status)}")


def _request_rows(run: PeerRun, run_id: str, phase: str) -> pa.Table:
    rows = [r for r in run.requests if r.phase == phase]
    cols = {
        "run_id": [run_id] * len(rows),
        "request_id": [r.request_id for r in rows],
        "phase": [phase] * len(rows),
        "step": [r.step for r in rows],
        "load_mode": [r.load_mode for r in rows],
        "target": [r.target for r in rows],
        "scheduled_at": [r.scheduled_ns for r in rows],
        "sent_at": [r.sent_ns for r in rows],
        "first_token_at": [r.first_token_ns for r in rows],
        "last_token_at": [r.last_token_ns for r in rows],
        "finished_at": [r.finished_ns for r in rows],
        "input_tokens": [r.input_tokens for r in rows],
        "output_tokens": [r.output_tokens for r in rows],
        "output_tokens_source": [source_of(run, r) for r in rows],
        "chunks": [len(r.chunk_ns or ()) for r in rows],
        "status": [r.status for r in rows],
        "http_status": [r.http_status for r in rows],
        # a peer keeps the server's text as it came, which may echo the request's key
        "error": [None if r.error is None else short_error(r.error) for r in rows],
        "cached_tokens": [r.cached_tokens for r in rows],
    }
    arrays = [_column(cols.get(f.name, [None] * len(rows)), f, run) for f in REQUEST_LOG]
    return pa.Table.from_arrays(arrays, schema=REQUEST_LOG)


def _column(values, f: pa.Field, run: PeerRun, size: int | None = None) -> pa.Array:
    """A column of the run folder, from a list or an iterator of `size` values; a value its
    type cannot hold (a count past int64, a string where a count goes) is a PeerFileError
    naming the file and the column."""
    try:
        return pa.array(values, f.type, size=size)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as exc:
        raise PeerFileError(f"{run.files[0]}: a value for {f.name} does not fit "
                            f"({yamltext.short(str(exc), 200)})") from None


CHUNK_BATCH = 1 << 18  # chunks per row group of an imported chunk log (about, whole requests)


def _int64s(values, f: pa.Field, run: PeerRun, n: int) -> pa.Array:
    """`n` integers as an Arrow column, through a compact int64 buffer (8 bytes each): Arrow
    turns an iterator into a list of objects first, 40 bytes an integer."""
    buf = array("q")
    try:
        buf.extend(values)
    except (OverflowError, TypeError) as exc:
        raise PeerFileError(f"{run.files[0]}: a value for {f.name} does not fit "
                            f"({yamltext.short(str(exc), 200)})") from None
    return pa.Array.from_buffers(f.type, n, [None, pa.py_buffer(buf)])


def _chunk_rows(run: PeerRun, run_id: str, requests: list[PeerRequest]) -> pa.Table:
    """The chunk log of `requests`, each column built in a compact buffer: a Python list per
    column (an object per chunk for each) took ten times the peer file's size in memory,
    most of an import's peak (docs/performance.md)."""
    rs = [r for r in requests if r.chunk_ns]
    lengths = [len(r.chunk_ns) for r in rs]
    total = sum(lengths)
    ids = _column([r.request_id for r in rs], CHUNK_LOG.field("request_id"), run)
    index = array("i")
    for i, n in enumerate(lengths):
        index.extend(repeat(i, n))
    kinds = None
    if any(r.chunk_kinds for r in rs):
        kinds = [k for r, n in zip(rs, lengths, strict=True)
                 for k in (r.chunk_kinds or repeat(None, n))]
    ints = {
        "seq": lambda: chain.from_iterable(range(n) for n in lengths),
        "at": lambda: chain.from_iterable(r.chunk_ns for r in rs),
        "tokens": lambda: chain.from_iterable(r.chunk_tokens or repeat(1, n)
                                              for r, n in zip(rs, lengths, strict=True)),
    }
    arrays = []
    for f in CHUNK_LOG:
        if f.name in ints:
            arrays.append(_int64s(ints[f.name](), f, run, total))
        elif f.name in ("run_id", "request_id"):
            dictionary = ids if f.name == "request_id" else pa.array([run_id], f.type)
            at = index if f.name == "request_id" else array("i", bytes(4 * total))
            arrays.append(pa.DictionaryArray.from_arrays(
                pa.Array.from_buffers(pa.int32(), total, [None, pa.py_buffer(at)]),
                dictionary).dictionary_decode())
        elif f.name == "kind" and kinds is not None:
            arrays.append(_column(kinds, f, run))
        else:  # no kinds, or a column the contract adds later: null, as an absent one reads
            arrays.append(pa.nulls(total, f.type))
    return pa.Table.from_arrays(arrays, schema=CHUNK_LOG)


def _write_chunks(run: PeerRun, run_id: str, path: Path) -> None:
    """The chunk log, about CHUNK_BATCH chunks (whole requests) at a time, a row group each:
    only one batch's columns are ever in memory beside the requests."""
    def batches():
        batch, n = [], 0
        for r in run.requests:
            batch.append(r)
            n += len(r.chunk_ns or ())
            if n >= CHUNK_BATCH:
                yield batch
                batch, n = [], 0
        if batch:
            yield batch

    def write(f) -> None:
        with pq.ParquetWriter(f, CHUNK_LOG) as w:
            for batch in batches():
                w.write_table(_chunk_rows(run, run_id, batch))

    durable.write_with(path, write)


def _span(rs: list[PeerRequest]) -> dict | None:
    starts = [r.sent_ns for r in rs if r.sent_ns is not None]
    ends = [r.finished_ns for r in rs if r.finished_ns is not None]
    if not starts or not ends:
        return None
    return {"started_at": mf.format_ts(min(starts)), "ended_at": mf.format_ts(max(ends))}


def _steps(run: PeerRun) -> list[dict]:
    steps: dict[str, dict] = {}
    for r in sorted((r for r in run.requests if r.phase == "steady"),
                    key=lambda r: r.sent_ns if r.sent_ns is not None else 0):
        # The peers do not watch their own client, so no step is known to be client-limited;
        # `false` here means "not flagged" (the manifest's `import.notes` says so).
        steps.setdefault(r.step, {"step": r.step, "load_mode": r.load_mode, "target": r.target,
                                  "client_limited": False, "client_cpu_share": None,
                                  "loop_lag_p99_s": None})
    return list(steps.values())


def default_run_id(run: PeerRun) -> str:
    first = min((r.sent_ns for r in run.requests if r.sent_ns is not None), default=0)
    stamp = mf.format_ts(first)[:19].replace("-", "").replace(":", "")
    return f"{stamp}Z-{run.peer}-{sha256(run.files[0])[:8]}"


def manifest_for(run: PeerRun, base: dict, run_id: str, source: str) -> dict:
    """The manifest of the imported run: `base`'s candidate and scope (from --manifest-from
    or the flags), the peer's timing, and the `import` block saying what came from where."""
    first = min((r.sent_ns for r in run.requests if r.sent_ns is not None), default=None)
    if first is None:
        raise PeerFileError(f"{run.files[0]}: no request has a send time")
    m = mf.empty(run_id, source, first)
    # what describes the candidate and its scope (accelerators, price bases included); never
    # what belongs to the other run (its id, times, steps, workers, an import of its own)
    keep = (set(mf.TOP_KEYS) | set(mf.OPTIONAL_KEYS)) - {
        "run_id", "source", "created_at", "phases", "steps", "workers", "import"}
    m.update({k: v for k, v in base.items() if k in keep and v is not None})
    if m["model"] is None:
        m["model"] = run.model
    if m["scenario"] is None:
        m["scenario"] = run.scenario
    phases = {}
    for phase in ("warmup", "steady"):
        span = _span([r for r in run.requests if r.phase == phase])
        if span:
            phases[phase] = span
    m["phases"] = phases
    m["steps"] = _steps(run)
    m["import"] = {
        "peer": run.peer, "peer_version": run.peer_version,
        "files": [p.name for p in run.files],
        "files_sha256": [sha256(p) for p in run.files],
        "chunk_times": run.chunk_times, "output_tokens": run.output_tokens,
        "notes": list(run.notes) + [
            "steps[].client_limited: the peer does not watch its own client; false means "
            "not flagged, not measured"],
    }
    return mf.validate(m)


def write_run(run: PeerRun, out: Path, base: dict, run_id: str | None = None,
              source: str = "emulated") -> dict:
    """Write `run` as a run folder at `out` (created; an existing folder with files in it is
    refused, never overwritten). Returns the manifest."""
    if run.chunk_times not in CHUNK_TIMES or run.output_tokens not in TOKEN_COUNTS:
        raise ValueError(f"reader of {run.peer}: chunk_times/output_tokens out of range")
    if not run.requests:
        raise PeerFileError(f"{run.files[0]}: no request records in it")
    _check(run)
    run.notes = list(run.notes) + disagreements(run)
    m = manifest_for(run, base, run_id or default_run_id(run), source)
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"--out {out}: exists and is not an empty folder (an import "
                              "never overwrites a run)")
    out.mkdir(parents=True, exist_ok=True)
    write_parquet(_request_rows(run, m["run_id"], "warmup"), out / "warmup_log.parquet")
    write_parquet(_request_rows(run, m["run_id"], "steady"),
                  out / "steady_state_request_log.parquet")
    _write_chunks(run, m["run_id"], out / "chunk_log.parquet")
    mf.dump(m, out / "manifest.json")
    return m
