"""servingbench's records in forms other tools read (`servingbench export`, docs/import.md).

* `aiperf`: one AIPerf 0.13 artifact folder per step (`<out>/<step>/profile_export.jsonl`
  and `profile_export_aiperf.json`), which AIPerf's own viewer (`aiperf plot`, its
  `DataLoader`) reads, and which `servingbench import aiperf` reads back. Times are the
  run's own (wall-clock ns); the per-request figures are computed from them exactly as
  AIPerf defines its own (TTFT, the gaps between chunks, ITL over the tokens after the
  first). The summary says it was written by servingbench, not measured by AIPerf.
* `csv`: one row per request, the request log's columns with the durations beside them.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
from servingbench.resources.contract import durable
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.redact import redact
from servingbench.resources.contract.schemas import read_records

AIPERF_FORMAT = "0.13.0"  # the AIPerf version whose file layout this writes
FORMATS = ("aiperf", "csv")


class ExportError(ValueError):
    """The run folder cannot be exported (names the file)."""


def _records(run_dir: Path) -> tuple[dict, list[dict], dict[str, list[tuple[int, int]]]]:
    m = mf.load(run_dir / "manifest.json")
    rows = []
    for name in ("warmup_log", "steady_state_request_log"):
        table = read_records(run_dir, name)
        if table is not None:
            rows += _ns_rows(table)
    if not rows:
        raise ExportError(f"{run_dir}: no request log to export")
    chunks: dict[str, list[tuple[int, int]]] = {}
    table = read_records(run_dir, "chunk_log")
    for c in _ns_rows(table) if table is not None else ():
        chunks.setdefault(c["request_id"], []).append((c["seq"], c["at"], c["tokens"]))
    return m, rows, {k: [(at, tok) for _, at, tok in sorted(v)] for k, v in chunks.items()}


def _ns_rows(table: pa.Table) -> list[dict]:
    """Rows with timestamps as integer ns (never through Python datetimes, which drop ns)."""
    cols = {}
    for field in table.schema:
        col = table.column(field.name)
        if pa.types.is_timestamp(field.type):
            col = col.cast(pa.int64())
        cols[field.name] = col.to_pylist()
    return [dict(zip(cols, vals, strict=True)) for vals in zip(*cols.values(), strict=True)]


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e6


def _per_request(r: dict, chunks: list[tuple[int, int]]) -> dict[str, float | list | None]:
    """The figures AIPerf keeps per request, from servingbench's timestamps."""
    sent, first, last = r["sent_at"], r["first_token_at"], r["last_token_at"]
    out: dict = {"request_latency": _ms(r["finished_at"] - sent) if r["finished_at"] and sent else None}
    if r["status"] != "ok" or first is None or sent is None:
        return out
    out["time_to_first_token"] = _ms(first - sent)
    ats = [at for at, _ in chunks]
    out["inter_chunk_latency"] = [_ms(b - a) for a, b in zip(ats, ats[1:], strict=False)]
    if len(ats) > 1:
        out["time_to_second_token"] = _ms(ats[1] - ats[0])
    n = r["output_tokens"]
    if n is not None:
        out["output_sequence_length"] = n
        if n > 1 and last is not None:
            out["inter_token_latency"] = _ms(last - first) / (n - 1)
    if r["input_tokens"] is not None:
        out["input_sequence_length"] = r["input_tokens"]
    return out


UNITS = {"request_latency": "ms", "time_to_first_token": "ms", "inter_chunk_latency": "ms",
         "time_to_second_token": "ms", "inter_token_latency": "ms",
         "output_sequence_length": "tokens", "input_sequence_length": "tokens"}


def _aiperf_line(i: int, r: dict, chunks: list[tuple[int, int]]) -> dict:
    metrics = {k: {"value": v, "unit": UNITS[k]} for k, v in _per_request(r, chunks).items()
               if v is not None}
    line = {"metadata": {
        "session_num": i, "x_request_id": r["request_id"], "turn_index": r.get("turn") or 0,
        "credit_issued_ns": r["scheduled_at"], "request_start_ns": r["sent_at"],
        "request_end_ns": r["finished_at"], "worker_id": r.get("worker") or "servingbench",
        "record_processor_id": "servingbench-export",
        "benchmark_phase": "warmup" if r["phase"] == "warmup" else "profiling",
        "phase_name": "warmup" if r["phase"] == "warmup" else "profiling",
        "phase_kind": "warmup" if r["phase"] == "warmup" else "profiling",
        "was_cancelled": r["status"] == "cancelled"}, "metrics": metrics}
    if r["status"] != "ok":
        line["error"] = {"code": r["http_status"], "type": r["status"],
                         "message": r["error"] or r["status"]}
    return line


def _stat(values: list[float], unit: str) -> dict | None:
    if not values:
        return None
    a = np.asarray(values, dtype=float)
    out = {"unit": unit, "avg": float(a.mean())}
    for p in (1, 5, 10, 25, 50, 75, 90, 95, 99):
        out[f"p{p}"] = float(np.percentile(a, p))
    out.update(min=float(a.min()), max=float(a.max()), std=float(a.std()),
               count=len(values), sum=float(a.sum()))
    return out


def _summary(m: dict, step: dict, rows: list[dict], figures: list[dict], warmup: int) -> dict:
    ok = [(r, f) for r, f in zip(rows, figures, strict=True) if r["status"] == "ok"]
    starts = [r["sent_at"] for r in rows if r["sent_at"] is not None]
    ends = [r["finished_at"] for r in rows if r["finished_at"] is not None]
    duration_s = (max(ends) - min(starts)) / 1e9 if starts and ends else None
    out_tokens = sum(r["output_tokens"] or 0 for r, _ in ok)
    phase = {"name": "profiling", "kind": "profiling", "requests": len(rows)}
    if step["load_mode"] == "concurrency":
        phase.update(type="concurrency", concurrency=int(step["target"]))
    else:
        phase.update(type="poisson", rate=step["target"])
    phases = [phase]
    if warmup:  # servingbench's warm-up, held at the step's load as AIPerf holds its own
        phases.insert(0, {**phase, "name": "warmup", "kind": "warmup", "requests": warmup,
                          "exclude_from_results": True})
    doc = {
        "schema_version": "1.4", "aiperf_version": AIPERF_FORMAT,
        "producer": f"servingbench export of run {m['run_id']} ({m['source']}), not an "
                    "AIPerf measurement",
        "benchmark_id": f"{m['run_id']}-{step['step']}",
        "input_config": {"models": {"items": [{"name": m.get("model") or "unknown"}]},
                         "phases": phases},
        "request_count": {"unit": "requests", "avg": float(len(ok))},
        "total_output_tokens": {"unit": "tokens", "avg": float(out_tokens)},
        "was_cancelled": False, "is_complete": True, "error_summary": [],
        "start_time": mf.format_ts(min(starts)) if starts else None,
        "end_time": mf.format_ts(max(ends)) if ends else None,
    }
    if duration_s:
        doc["benchmark_duration"] = {"unit": "sec", "avg": duration_s}
        doc["request_throughput"] = {"unit": "requests/sec", "avg": len(ok) / duration_s}
        doc["output_token_throughput"] = {"unit": "tokens/sec", "avg": out_tokens / duration_s}
    for name in ("time_to_first_token", "inter_token_latency", "request_latency",
                 "output_sequence_length", "input_sequence_length", "time_to_second_token"):
        st = _stat([f[name] for _, f in ok if f.get(name) is not None], UNITS[name])
        if st:
            doc[name] = st
    icl = _stat([g for _, f in ok for g in f.get("inter_chunk_latency") or ()], "ms")
    if icl:
        doc["inter_chunk_latency"] = icl
    return doc


def export_aiperf(run_dir: Path, out: Path) -> list[Path]:
    """One AIPerf artifact folder per step under `out`; returns them."""
    m, rows, chunks = _records(Path(run_dir))
    steady = [r for r in rows if r["phase"] == "steady"]
    warmup = [r for r in rows if r["phase"] == "warmup"]
    steps = m["steps"] or [{"step": s, "load_mode": mode, "target": t} for s, mode, t in
                           dict.fromkeys((r["step"], r["load_mode"], r["target"]) for r in steady)]
    _fresh(out)
    folders = []
    seen: set[str] = set()
    for k, step in enumerate(steps):
        mine = [r for r in steady if r["step"] == step["step"]]
        if not mine:
            continue
        # the run's warm-up goes with its first step, as AIPerf keeps it with its one phase
        recs = (warmup if k == 0 else []) + mine
        folder = out / _folder_name(step["step"], seen)
        folder.mkdir(parents=True)
        lines = [_aiperf_line(i, r, chunks.get(r["request_id"], [])) for i, r in enumerate(recs)]
        text = "".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines)
        durable.write_text(folder / "profile_export.jsonl", text)
        figures = [_per_request(r, chunks.get(r["request_id"], [])) for r in mine]
        durable.write_json(folder / "profile_export_aiperf.json", _summary(m, step, mine, figures,
                                                                   len(recs) - len(mine)))
        folders.append(folder)
    return folders


CSV_EXTRA = ("ttft_s", "e2e_s", "tpot_s", "itl_s_mean")


def export_csv(run_dir: Path, out: Path) -> Path:
    """One CSV row per request: the request log's columns, timestamps as RFC 3339 text, and
    the request's TTFT, end-to-end time, TPOT and mean gap between chunks (seconds)."""
    m, rows, chunks = _records(Path(run_dir))
    if out.exists():
        raise ExportError(f"--out {out}: exists (an export never overwrites)")
    names = list(rows[0])
    ts = {"scheduled_at", "sent_at", "first_token_at", "last_token_at", "finished_at"}

    text = io.StringIO()
    w = csv.writer(text, lineterminator="\n")
    w.writerow(["source", *names, *CSV_EXTRA])
    for r in rows:
        fig = _per_request(r, chunks.get(r["request_id"], []))
        gaps = fig.get("inter_chunk_latency") or []
        extra = [_s(fig.get("time_to_first_token")), _s(fig.get("request_latency")),
                 _s(fig.get("inter_token_latency")), _s(sum(gaps) / len(gaps)) if gaps else ""]
        w.writerow([m["source"], *[_cell(r[k], k in ts) for k in names], *extra])
    durable.write_text(out, text.getvalue())
    return out


_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]")


def _folder_name(step: str, seen: set[str]) -> str:
    """A step's name as one folder name inside --out: the run's names come from files
    (an imported peer's), so `..`, `.`, a slash or an empty name must not leave it or
    collide; each folder name is used once."""
    name = _UNSAFE.sub("_", str(step))[:100]
    if name.strip(".") == "":
        name = f"step_{name.replace('.', '_')}"
    base, i = name, 2
    while name in seen:
        name, i = f"{base}-{i}", i + 1
    seen.add(name)
    return name


def _s(ms: float | None) -> str:
    return "" if ms is None else repr(ms / 1e3)


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value, is_ts: bool) -> str:
    """A CSV cell. Text (an error message, perhaps an imported peer's) is redacted as our
    own error texts are, and text a spreadsheet would run as a formula (starting = + - @,
    tab or CR) gets a leading apostrophe, OWASP's advice; numbers are left as they are."""
    if value is None:
        return ""
    if is_ts:
        return mf.format_ts(value)
    if isinstance(value, str):
        value = redact(value)
        return "'" + value if value.startswith(FORMULA_START) else value
    return str(value)


def _fresh(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"--out {out}: exists and is not empty (an export never overwrites)")
    out.mkdir(parents=True, exist_ok=True)
