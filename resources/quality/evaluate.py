"""Run the evaluation set against an OpenAI-compatible endpoint and write the run folder's
`quality.parquet` (one row per item) and `quality_summary.json` (contract §3.3).

One request at a time, temperature 0, not streamed: the quality figure is the model's
answer, never a timing (each item's latency is kept for reference only). Items are asked
through the plain completions API with a fixed few-shot header (`Q: … / A: …`, stopping at
the end of the line): that works the same for base models without a chat template (the
Gemma 3 270M GGUF of `make engine` is one) and for instruction-tuned ones, on any
OpenAI-compatible server.
Scoring is exact after a fixed normalization of the reply: its first line, trimmed,
lowercased, with surrounding quotes, markdown emphasis and trailing punctuation removed.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
import uuid
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
from servingbench.resources.http import control
from servingbench.resources.quality.evalset import Item, set_sha256

QUALITY_FILE = "quality.parquet"
SUMMARY_FILE = "quality_summary.json"
SCHEMA = pa.schema([("run_id", pa.string()), ("item_id", pa.string()),
                    ("prompt_sha256", pa.string()), ("expected", pa.string()),
                    ("got", pa.string()), ("correct", pa.bool_()), ("latency_s", pa.float64())])
_STRIP = " \t\"'`*_.,;:!?"
# Three worked examples in the answer format; none of them is an item of the default set.
FEW_SHOT = ("Q: What is 3 + 4? Reply with the number only.\nA: 7\n\n"
            "Q: Repeat this word exactly, and nothing else: apple\nA: apple\n\n"
            "Q: What is the capital of Portugal? Reply with one word.\nA: Lisbon\n\n")


def prompt_of(item: Item) -> str:
    return f"{FEW_SHOT}Q: {item.prompt}\nA:"


class QualityError(RuntimeError):
    """The evaluation could not run (endpoint unreachable, a request failed)."""


def normalize(text: str | None) -> str:
    if text is None:
        return ""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    first = re.sub(r"\s+", " ", first).strip(_STRIP).lower()
    return first


def score(got: str | None, expected: str) -> bool:
    return normalize(got) == normalize(expected)


def wilson(correct: int, n: int, z: float = 1.959963984540054) -> tuple[float | None, float | None]:
    """Wilson score interval (95 % by default); (None, None) when n = 0."""
    if n == 0:
        return None, None
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


ANSWER_BYTES = 1 << 20  # one short completion; a larger answer is not one


def _ask(http: httpx.Client, url: str, model: str, item: Item, max_tokens: int,
         headers: dict, deadline_s: float) -> tuple[str, float]:
    """One item, through the bounded control read (overall deadline, size cap, identity):
    the engine is still up and paid for while quality runs, so no answer may hold it."""
    body = {"model": model, "prompt": prompt_of(item), "temperature": 0,
            "max_tokens": max_tokens, "stop": ["\n"], "stream": False, "seed": 0}
    t0 = time.perf_counter_ns()
    try:
        r, raw = control.request(http, "POST", url, json=body, max_bytes=ANSWER_BYTES,
                                 deadline_s=deadline_s,
                                 headers={**headers, "X-Request-ID": str(uuid.uuid4())})
    except (httpx.HTTPError, control.ControlError) as exc:
        raise QualityError(f"{url}: {type(exc).__name__} on item {item.item_id}") from None
    latency = (time.perf_counter_ns() - t0) / 1e9
    if r.status_code != 200:
        text = raw[:200].decode("utf-8", "replace")
        raise QualityError(f"{url}: HTTP {r.status_code} on item {item.item_id}: {text}")
    try:
        content = json.loads(raw)["choices"][0]["text"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise QualityError(f"{url}: malformed answer to item {item.item_id}") from None
    return content or "", latency


def evaluate(endpoint: str, model: str, run_id: str, run_dir: Path, eval_set: str,
             items: list[Item], max_tokens: int = 16, headers: dict | None = None,
             timeout_s: float = 120) -> dict:
    """Ask every item, write both files (atomically), return the summary (plus `by_kind`)."""
    url = endpoint.rstrip("/").removesuffix("/v1") + "/v1/completions"
    rows = []
    with httpx.Client(timeout=timeout_s, trust_env=False) as http:
        for item in items:
            got, latency = _ask(http, url, model, item, max_tokens, headers or {}, timeout_s)
            rows.append({"run_id": run_id, "item_id": item.item_id,
                         # the text the model was given, few-shot header included
                         "prompt_sha256": hashlib.sha256(prompt_of(item).encode()).hexdigest(),
                         "expected": item.answer, "got": got, "correct": score(got, item.answer),
                         "latency_s": latency})
    n, correct = len(rows), sum(r["correct"] for r in rows)
    low, high = wilson(correct, n)
    by_kind: dict[str, list[int]] = {}
    for item, row in zip(items, rows, strict=True):
        k = by_kind.setdefault(item.kind, [0, 0])
        k[0] += row["correct"]
        k[1] += 1
    summary = {"n": n, "correct": correct, "accuracy": correct / n if n else None,
               "ci95_low": low, "ci95_high": high, "eval_set": eval_set,
               "eval_set_sha256": set_sha256(items)}
    run_dir = Path(run_dir)
    tmp = run_dir / (QUALITY_FILE + ".tmp")
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), tmp)
    tmp.replace(run_dir / QUALITY_FILE)
    tmp = run_dir / (SUMMARY_FILE + ".tmp")
    tmp.write_text(json.dumps(summary, indent=1) + "\n")
    tmp.replace(run_dir / SUMMARY_FILE)
    # per kind: for the asset's metadata only (the file keeps contract §3.3's keys exactly)
    return summary | {"by_kind": {k: {"correct": c, "n": t}
                                  for k, (c, t) in sorted(by_kind.items())}}


def load_summary(run_dir: Path) -> dict | None:
    path = Path(run_dir) / SUMMARY_FILE
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
