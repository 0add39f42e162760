"""Trace replay: requests at the trace's own times (scaled by `speedup`), on one absolute
schedule, with the trace's input and output lengths.

Formats:
* mooncake (JSONL): `timestamp` (ms), `input_length`, `output_length`, `hash_ids`. Each hash
  id names a 512-token block; requests that share a hash id share that block, so a prompt
  is built block by block from text fixed per hash id, and a prefix cache sees the trace's
  shared prefixes as hits.
* azure (CSV, the Azure LLM inference trace): `TIMESTAMP` (`2023-11-16 18:15:46.6805900`),
  `ContextTokens`, `GeneratedTokens`. No prefix information: every prompt is unique.

Block and prompt lengths use the words-per-token ratio measured with the server's
`/tokenize` once (one word per token without it); `usage.prompt_tokens` records what the
server actually counted. Prompts and their request bodies are all built before the
schedule starts. The whole replay is one open-loop step `rate=<R>`, R being the
scaled trace's mean rate; `sched_lag_s_*` of the step is how faithfully the times were kept.
"""

from __future__ import annotations

import asyncio
import csv
import random
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from servingbench.resources.contract.digits import is_digits
from servingbench.resources.loadgen.config import MAX_TOKENS, jsonl, step_name
from servingbench.resources.loadgen.errors import LoadConfigError
from servingbench.resources.loadgen.prompts import Item, filler_words
from servingbench.resources.loadgen.scenarios.kind import (
    Key,
    Kind,
    optional,
    pos_int,
    pos_num,
    suggest,
)

MOONCAKE_BLOCK = 512
LEAD_S = 0.05  # the schedule starts this long after the prompts are built
_now = time.perf_counter_ns
TRACE_FORMATS = ("mooncake", "azure")


def _check(s, where: str) -> None:
    if s.trace is None:
        raise LoadConfigError(f"{where}.trace: required for a trace replay (a JSONL or CSV file)")
    if s.trace_format not in TRACE_FORMATS:
        raise LoadConfigError(f"{where}.trace_format: {s.trace_format!r} is not one of "
                              f"{', '.join(TRACE_FORMATS)}" + suggest(s.trace_format, TRACE_FORMATS))
    if not Path(s.trace).is_file():
        raise LoadConfigError(f"{where}.trace: {s.trace} is not a file")


# a replay's requests come from the trace, so it takes no token targets
KIND = Kind("trace", order=3, targets=False, keys={
    "trace": Key(None, convert=lambda where, v: Path(v)),
    "trace_format": Key(None),
    "speedup": Key(1.0, pos_num),
    "max_requests": Key(None, optional(pos_int)),
}, check=_check, own_steps=True)


@dataclass(frozen=True)
class TraceRow:
    at_ns: int  # offset from the trace's first request, unscaled
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


def _int(path: Path, n: int, row: dict, key: str, lo: int, hi: int = MAX_TOKENS) -> int:
    """A length of the trace, `lo`..`hi` (the load's token bound: a longer one would make a
    prompt that exhausts memory before a request is sent)."""
    v = row.get(key)
    if isinstance(v, str) and is_digits(v.strip().removeprefix("-")):
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise LoadConfigError(f"{path}:{n}: {key}: expected an integer from {lo} to {hi:,}, "
                              f"got {str(v)[:40]!r}")
    return v


def read_mooncake(path: Path, limit: int | None) -> list[TraceRow]:
    rows = []
    for n, obj in jsonl(path):
        if not isinstance(obj, dict):
            raise LoadConfigError(f"{path}:{n}: expected a JSON object")
        ts = obj.get("timestamp")
        if isinstance(ts, bool) or not isinstance(ts, int | float) or ts < 0:
            raise LoadConfigError(f"{path}:{n}: timestamp: expected milliseconds >= 0, got {ts!r}")
        ids = obj.get("hash_ids", [])
        if not isinstance(ids, list) or not all(isinstance(h, int) for h in ids):
            raise LoadConfigError(f"{path}:{n}: hash_ids: expected a list of integers")
        rows.append(TraceRow(int(round(ts * 1e6)), _int(path, n, obj, "input_length", 1),
                             _int(path, n, obj, "output_length", 1), tuple(ids)))
        if limit is not None and len(rows) >= limit:
            break
    return _finish(path, rows)


def _azure_ts(path: Path, n: int, text: str) -> int:
    """`2023-11-16 18:15:46.6805900` → ns since the epoch (7 fractional digits kept exact)."""
    head, _, frac = text.strip().partition(".")
    try:
        base = datetime.fromisoformat(head.replace(" ", "T") + "+00:00")
        if frac and not is_digits(frac):
            raise ValueError
    except ValueError:
        raise LoadConfigError(f"{path}:{n}: TIMESTAMP: {text!r} is not 'YYYY-MM-DD HH:MM:SS[.f]'") from None
    return int(base.timestamp()) * 1_000_000_000 + int((frac + "0" * 9)[:9] or 0)


def read_azure(path: Path, limit: int | None) -> list[TraceRow]:
    rows = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} - set(reader.fieldnames or ())
        if missing:
            raise LoadConfigError(f"{path}: missing column {sorted(missing)[0]!r} "
                              "(expected TIMESTAMP, ContextTokens, GeneratedTokens)")
        for n, row in enumerate(reader, 2):
            rows.append(TraceRow(_azure_ts(path, n, row["TIMESTAMP"]),
                                 _int(path, n, row, "ContextTokens", 1),
                                 _int(path, n, row, "GeneratedTokens", 1)))
            if limit is not None and len(rows) >= limit:
                break
    return _finish(path, rows)


def _finish(path: Path, rows: list[TraceRow]) -> list[TraceRow]:
    if not rows:
        raise LoadConfigError(f"{path}: no requests")
    rows.sort(key=lambda r: r.at_ns)
    t0 = rows[0].at_ns
    return [TraceRow(r.at_ns - t0, r.input_tokens, r.output_tokens, r.hash_ids) for r in rows]


def read_trace(path: Path, fmt: str, limit: int | None = None) -> list[TraceRow]:
    return (read_mooncake if fmt == "mooncake" else read_azure)(Path(path), limit)


class PromptBuilder:
    """Prompt text of a given token length; block by block for hash ids."""

    def __init__(self, seed: int, words_per_token: float | None) -> None:
        self.seed, self.wpt = seed, words_per_token or 1.0
        self.blocks: dict[int, list[str]] = {}
        self.unique = random.Random(f"{seed}:trace-unique")

    def _words(self, n_tokens: int, rng: random.Random) -> list[str]:
        return filler_words(rng, round(n_tokens * self.wpt))

    def block(self, h: int) -> list[str]:
        if h not in self.blocks:
            self.blocks[h] = self._words(MOONCAKE_BLOCK, random.Random(f"{self.seed}:block:{h}"))
        return self.blocks[h]

    def prompt(self, row: TraceRow) -> str:
        if not row.hash_ids:  # no prefix information: a unique prompt
            return " ".join(self._words(row.input_tokens, self.unique))
        words: list[str] = []
        for h in row.hash_ids:
            words += self.block(h)
        want = max(1, round(row.input_tokens * self.wpt))
        if len(words) < want:  # the trace's length runs past its blocks: unique filler
            words += self._words(row.input_tokens - len(row.hash_ids) * MOONCAKE_BLOCK, self.unique)
        return " ".join(words[:want])


def plan(rows: list[TraceRow], speedup: float) -> tuple[list[int], float]:
    """Scaled send offsets (ns) and the step's target: the scaled mean rate (req/s)."""
    offsets = [int(r.at_ns / speedup) for r in rows]
    span = offsets[-1] / 1e9
    rate = (len(rows) - 1) / span if span > 0 else float(len(rows))
    return offsets, round(rate, 3)


def request_bodies(run, rows: list[TraceRow]) -> list[bytes]:
    """Every request's body, serialized before the schedule starts: at a send time only the
    send is left, so `sent_at − scheduled_at` measures the scheduling, not the building and
    JSON encoding of prompts thousands of tokens long. Only the bodies are kept (each prompt
    once in memory)."""
    builder = PromptBuilder(run.cfg.seed, run.prompts.words_per_token)
    return [run.prompts.body(Item(builder.prompt(r), r.output_tokens), run.stream_options)
            for r in rows]


async def steady(run) -> None:
    s = run.cfg.scenario
    rows = read_trace(s.trace, s.trace_format, s.max_requests)
    offsets, rate = plan(rows, s.speedup)
    # several workers: each replays the rows whose index is its own (workers/share.py); every body
    # is built in trace order first, so a row's prompt is the one a single worker sends
    bodies = run.share.deal(request_bodies(run, rows))
    offsets = run.share.deal(offsets)
    name = step_name("rate", rate)

    async def drive() -> None:
        origin = run.origin + int(LEAD_S * 1e9)  # the step's common start (every worker's)
        tasks = set()
        for off, body in zip(offsets, bodies, strict=True):
            deadline = origin + off
            while (now := _now()) < deadline:
                await asyncio.sleep((deadline - now) / 1e9)
            tasks.add(run.spawn(run.send("steady", name, "rate", rate, deadline, None,
                                         body=body)))
        await run.drain(tasks)

    await run.run_step(name, "rate", rate, len(bodies), drive)


PLUGIN = KIND  # what this file adds to the scenarios package
