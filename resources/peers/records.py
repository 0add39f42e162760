"""What every peer reader returns (`PeerRun`), and how a reader reads its peer's files (errors
naming the file and the field, bounded in bytes, records and depth); run_writer.py writes
the run folder a PeerRun becomes.

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
from pathlib import Path

from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract import yamltext

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
        raise PeerFileError(f"{at}not JSON this importer reads ({short(str(exc))})") from None


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
            raise PeerFileError(f"{path}: {where}: {short(value)} is not a finite number "
                                "in range")
        raise PeerFileError(f"{path}: {where}: expected {names}, got {short(value)}")
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
            raise PeerFileError(f"{path}: {at}: expected an object, got {short(obj)}")
        obj, at = obj.get(key), f"{at}.{key}"
    return default if obj is None else check(obj, kinds, at, path)


def numbers(value, where: str, path: Path) -> list:
    """A list of finite numbers in range (at most MAX_RECORDS of them)."""
    if not isinstance(value, list):
        raise PeerFileError(f"{path}: {where}: expected a list of numbers, got {short(value)}")
    count(value, path, where)
    for i, x in enumerate(value):
        check(x, NUM, f"{where}[{i}]", path)
    return value


def short(value) -> str:
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
