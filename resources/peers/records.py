"""What every peer reader returns (`PeerRun`) and the one writer of the run folder it becomes.

A peer keeps some of the timestamps servingbench records and not others. Each reader fills
what its peer recorded and leaves the rest None; nothing here makes a missing time up. The
chunk log is the peer's own chunk times (`chunk_times = "recorded"`), or rebuilt from its
time to first token and inter-token latencies (`"reconstructed_from_itl"`), or, where the
peer kept only the first and last token times, those two (`"first_and_last"`); the
request log's `output_tokens_source` says which (contract §2.2, docs/import.md).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from array import array
from dataclasses import dataclass, field
from itertools import chain, repeat
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from servingbench.resources.contract import durable, yamltext
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.redact import short_error
from servingbench.resources.contract.schemas import CHUNK_LOG, REQUEST_LOG, STATUSES, write_parquet

NS = 1_000_000_000
CHUNK_TIMES = ("recorded", "reconstructed_from_itl", "first_and_last")
# Where a peer's output token count came from (the manifest's `import.output_tokens`).
TOKEN_COUNTS = ("usage", "tokenizer", "chunks")
# The figures a peer's own summary is held against its records with (per step).
FIGURES = ("requests", "ok", "output_tokens", "ttft_ms_mean", "itl_ms_mean")
# Counts must agree exactly; a mean may differ by rounding in the peer's summary.
MEAN_TOLERANCE = 0.01


class PeerFileError(ValueError):
    """A peer's result file is malformed, truncated or mixed-version: the message names the
    file and the field."""


@dataclass
class PeerRequest:
    step: str
    load_mode: str
    target: float | None
    phase: str = "steady"
    request_id: str | None = None
    scheduled_ns: int | None = None
    sent_ns: int | None = None
    first_token_ns: int | None = None
    last_token_ns: int | None = None
    finished_ns: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    chunk_ns: list[int] | array | None = None  # absolute chunk times, when known
    chunk_tokens: list[int] | None = None  # tokens per chunk; None: one each
    chunk_kinds: list[str | None] | None = None  # `reasoning` where the peer saw it (§2.3)
    status: str = "ok"
    http_status: int | None = None
    error: str | None = None
    cached_tokens: int | None = None


@dataclass
class PeerRun:
    peer: str
    peer_version: str | None
    files: list[Path]
    requests: list[PeerRequest]
    chunk_times: str
    output_tokens: str
    model: str | None = None
    scenario: dict | None = None
    # the peer's own summary, per step: {step: {figure: value}} over FIGURES (those it states)
    figures: dict[str, dict[str, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


# --- reading a peer's files with errors that name the file and the field --------------------

# What a peer's file may be: results of a night's benchmark are a few MiB and some 10^4
# requests; these are far above that and below what would exhaust the importer. An import
# peaks at about 5x the file's size (a vLLM result of 6-digit gaps) over the command's own
# ~125 MiB, 9.5x for the densest file (every gap `1.0`; benchmarks/peer_import_memory.py,
# docs/performance.md): at 256 MiB that is at most ~2.7 GiB, inside the 4 GiB a run's pod
# asks for (512 MiB needed ~5 GiB, and ~23 GiB before the chunk log was built in batches).
MAX_FILE_BYTES = 256 << 20
MAX_RECORDS = 2_000_000
NUM = (int, float)
MAX_DEPTH = 32  # the deepest peer file nests about 8 levels (aiperf's input_config)
# The largest number a peer's field may hold: every clock the readers convert is in seconds
# (a Unix time or a perf_counter reading), milliseconds or integer ns, and the conversion to
# ns must stay inside int64 (2^63 ns is the year 2262).
FLOAT_LIMIT = 4e9
INT_LIMIT = 2 ** 61


def read_bytes(path: Path, missing: str) -> bytes:
    """The file's bytes, refused past MAX_FILE_BYTES (from its size, before a byte is read,
    where it has one); `missing` says what a missing file means."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            too_large = size > MAX_FILE_BYTES
            # read by its size (a read of the cap would allocate the cap); a file that grew
            # meanwhile, or a pipe (size 0), is read on up to the cap
            data = b"" if too_large else f.read(size + 1)
            if not too_large and len(data) > size:
                data += f.read(MAX_FILE_BYTES + 1 - len(data))
    except FileNotFoundError:
        raise PeerFileError(f"{path}: {missing}") from None
    except IsADirectoryError:
        raise PeerFileError(f"{path}: is a folder, expected a file") from None
    except OSError as exc:
        raise PeerFileError(f"{path}: unreadable ({exc.strerror or exc})") from None
    if too_large or len(data) > MAX_FILE_BYTES:
        raise PeerFileError(f"{path}: larger than {MAX_FILE_BYTES} bytes; not a peer's result "
                            "this importer reads")
    return data


def read_text(path: Path, missing: str) -> str:
    data = read_bytes(path, missing)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PeerFileError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def parse_json(text: str, path: Path, where: str = ""):
    """JSON text -> a document, nested at most MAX_DEPTH deep (counted without recursion, as
    the manifest reader does); a defect is a PeerFileError naming `path` (and `where`, a line
    of a JSON Lines file or a field holding JSON). NaN and Infinity parse, as Python writes
    them; the field checks refuse them with the key's name."""
    at = f"{path}: {where}: " if where else f"{path}: "
    if mf._depth(text) > MAX_DEPTH:
        raise PeerFileError(f"{at}nested more than {MAX_DEPTH} levels deep; not a peer's result")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise PeerFileError(f"{at}not JSON, or cut short (line {exc.lineno} column {exc.colno}: "
                            f"{exc.msg})") from None
    except (ValueError, RecursionError) as exc:  # an integer too long to convert
        raise PeerFileError(f"{at}not JSON this importer reads ({_short(str(exc))})") from None


def read_json(path: Path, missing: str):
    return parse_json(read_text(path, missing), path)


def read_jsonl(path: Path, missing: str) -> list[dict]:
    """One JSON object per non-blank line, at most MAX_RECORDS of them."""
    out = []
    for n, line in enumerate(read_text(path, missing).splitlines(), 1):
        if not line.strip():
            continue
        doc = parse_json(line, path, f"line {n}")
        if not isinstance(doc, dict):
            raise PeerFileError(f"{path}: line {n}: expected a JSON object")
        out.append(doc)
        count(out, path, "lines")
    return out


def read_yaml(path: Path, missing: str) -> dict:
    """A YAML mapping, without anchors or aliases (resources/contract/yamltext.py)."""
    try:
        doc = yamltext.load(read_text(path, missing))
    except yamltext.YamlError as exc:
        raise PeerFileError(f"{path}: {exc}") from None
    if not isinstance(doc, dict):
        raise PeerFileError(f"{path}: expected a mapping")
    return doc


def count(items, path: Path, where: str):
    """`items`, refused when it holds more than MAX_RECORDS."""
    if len(items) > MAX_RECORDS:
        raise PeerFileError(f"{path}: {where}: more than {MAX_RECORDS} records; more than "
                            "this importer takes from one file")
    return items


def _bad_number(value) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return True
    if isinstance(value, float):
        return not math.isfinite(value) or abs(value) > FLOAT_LIMIT
    return abs(value) > INT_LIMIT


def check(value, kinds, where: str, path: Path, nullable: bool = False):
    """`value` if it is one of `kinds` (a number: finite and within FLOAT_LIMIT / INT_LIMIT;
    a bool only where `bool` is asked for), else PeerFileError naming `path` and `where`."""
    if value is None and nullable:
        return None
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    bad_bool = isinstance(value, bool) and bool not in kinds
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if not isinstance(value, kinds) or bad_bool or (numeric and _bad_number(value)):
        names = "a number" if kinds == NUM else " or ".join(k.__name__ for k in kinds)
        if numeric and isinstance(value, kinds):
            raise PeerFileError(f"{path}: {where}: {_short(value)} is not a finite number "
                                "in range")
        raise PeerFileError(f"{path}: {where}: expected {names}, got {_short(value)}")
    return value


def need(obj, key: str, kinds, where: str, path: Path, nullable: bool = False):
    """`obj[key]` of one of `kinds`, or PeerFileError naming `path` and `where.key`."""
    if not isinstance(obj, dict):
        raise PeerFileError(f"{path}: {where}: expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise PeerFileError(f"{path}: {where}.{key}: missing")
    return check(obj[key], kinds, f"{where}.{key}", path, nullable)


def dig(obj, keys: tuple[str, ...], kinds, where: str, path: Path, default=None):
    """The value at `obj[k0][k1]...` when every step is an object and the value is one of
    `kinds`; `default` where a key is missing or null; PeerFileError naming the key where
    a step is not an object or the value has another type. Replaces `.get(..) or {}` chains,
    which fail on a list or a number where an object was meant."""
    at = where
    for key in keys:
        if obj is None:
            return default
        if not isinstance(obj, dict):
            raise PeerFileError(f"{path}: {at}: expected an object, got {_short(obj)}")
        obj, at = obj.get(key), f"{at}.{key}"
    return default if obj is None else check(obj, kinds, at, path)


def numbers(value, where: str, path: Path) -> list:
    """A list of finite numbers in range (at most MAX_RECORDS of them)."""
    if not isinstance(value, list):
        raise PeerFileError(f"{path}: {where}: expected a list of numbers, got {_short(value)}")
    count(value, path, where)
    for i, x in enumerate(value):
        check(x, NUM, f"{where}[{i}]", path)
    return value


def _short(value) -> str:
    return yamltext.short(repr(value) if isinstance(value, str) else value)


def read_result(reader, path: Path, **kw) -> PeerRun:
    """`reader.read(path, **kw)` (a module of this package), where any defect the field
    checks did not name is still a PeerFileError naming the file, never a traceback."""
    try:
        return reader.read(path, **kw)
    except PeerFileError:
        raise
    except RecursionError:
        raise PeerFileError(f"{path}: nested too deeply to be a peer's result") from None
    except (TypeError, AttributeError, IndexError, KeyError, OverflowError, ValueError,
            ArithmeticError) as exc:
        raise PeerFileError(f"{path}: malformed ({type(exc).__name__}: "
                            f"{yamltext.short(str(exc), 200)})") from None


def seconds_ns(t: float) -> int:
    """Seconds as a float (a Unix time, a perf_counter reading) -> integer ns, to the float's
    own precision: `round(t * 1e9)` would round a 2026 Unix time to 256 ns, since the product
    is past 2^60; the whole seconds and the fraction are converted apart (both exact)."""
    whole = math.floor(t)
    return whole * NS + round((t - whole) * NS)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# --- chunk times from inter-token latencies --------------------------------------------------

def chunks_from_itl(sent_ns: int, ttft_s: float, itls_s: list[float]) -> array:
    """The chunk times a peer that kept only TTFT and the gaps between chunks implies:
    `sent + ttft`, then each gap added on. Rounded once per chunk from the running sum in
    seconds, so rounding never accumulates. An int64 array (8 bytes a chunk, where a list
    of ints takes 40): an import keeps every request's chunk times until it writes them."""
    out, elapsed = array("q", (sent_ns + seconds_ns(ttft_s),)), ttft_s
    for gap in itls_s:
        elapsed += gap
        out.append(sent_ns + seconds_ns(elapsed))
    return out


# --- the peer's summary against its own records ----------------------------------------------

def record_figures(requests: list[PeerRequest]) -> dict[str, dict[str, float]]:
    """FIGURES per step from the steady records, computed as the peers define them: TTFT
    and the mean gap between chunks over successful requests."""
    out: dict[str, dict[str, float]] = {}
    for step in dict.fromkeys(r.step for r in requests if r.phase == "steady"):
        rs = [r for r in requests if r.phase == "steady" and r.step == step]
        ok = [r for r in rs if r.status == "ok"]
        ttft = [(r.first_token_ns - r.sent_ns) / 1e6 for r in ok
                if r.first_token_ns is not None and r.sent_ns is not None]
        # the mean gap is the span over the gaps of each request: no list of every gap
        n_gaps = sum(len(r.chunk_ns) - 1 for r in ok if r.chunk_ns)
        span = sum(r.chunk_ns[-1] - r.chunk_ns[0] for r in ok if r.chunk_ns) / 1e6
        fig = {"requests": float(len(rs)), "ok": float(len(ok)),
               "output_tokens": float(sum(r.output_tokens or 0 for r in ok))}
        if ttft:
            fig["ttft_ms_mean"] = sum(ttft) / len(ttft)
        if n_gaps:
            fig["itl_ms_mean"] = span / n_gaps
        out[step] = fig
    return out


def disagreements(run: PeerRun) -> list[str]:
    """Where the peer's own summary says something its records do not."""
    mine = record_figures(run.requests)
    notes = []
    for step, theirs in run.figures.items():
        have = mine.get(step, {})
        for name in FIGURES:
            if name not in theirs:
                continue
            said, found = theirs[name], have.get(name)
            if found is None:
                notes.append(f"step {step}: the peer's summary gives {name} {said:g}, its "
                             "records have nothing to compute it from")
                continue
            exact = name in ("requests", "ok", "output_tokens")
            off = abs(said - found) > (0.5 if exact else MEAN_TOLERANCE * max(abs(found), 1e-9))
            if off:
                rel = f" ({(said - found) / found:+.1%})" if found else ""
                notes.append(f"step {step}: the peer's summary gives {name} {said:g}, its "
                             f"records give {found:g}{rel}")
    return notes


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
            raise PeerFileError(f"{run.files[0]}: request id {_short(r.request_id)} appears twice")
        seen.add(r.request_id)
    for r in run.requests:
        if r.status not in STATUSES:
            raise PeerFileError(f"{run.files[0]}: request {_short(r.request_id)}: status "
                                f"{_short(r.status)}")


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
