"""The emulator for tests: its fixed-timing mode as a real process on 127.0.0.1 (the load
generator's tests and benchmarks measure against it), and small client helpers."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
from servingbench.emulator.process import EmulatorProcess
from servingbench.resources.http import control

SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
USAGE_OPTS = {"include_usage": True, "continuous_usage_stats": True}
FIXED_MODEL = "fixed"  # the name the fixed-timing server answers to


def fixed_timing_args(ttft_ms: float, itl_ms: float, ground_truth: Path | None = None) -> list[str]:
    """The emulator's options for a fixed-timing server: no model, no cold start, the
    tests' model name, its ground truth (one JSONL line per request) in `ground_truth`."""
    # --sched-slice-us 0 leaves the scheduler alone, as a plain test server does: on a
    # busy shared machine the short slice hint made its wake-ups win over the client's,
    # so the client read several tokens at once and the timing tests measured that
    args = ["--fixed-timing", f"{ttft_ms:g}:{itl_ms:g}", "--cold-start-s", "0",
            "--served-model-name", FIXED_MODEL, "--sched-slice-us", "0"]
    return args + (["--ground-truth", str(ground_truth)] if ground_truth else [])


class FixedTimingServer:
    """`emulator --fixed-timing TTFT:ITL` on 127.0.0.1: token k of a request is written at
    arrival + TTFT + k × ITL, and the server logs its own write times (ground truth).
    `flags` are further emulator options (`--no-tokenize`, `--api-key KEY`, ...)."""

    def __init__(self, tmp: Path, *flags: str, ttft_ms: float = 20, itl_ms: float = 5) -> None:
        self.ground_truth = Path(tmp) / f"truth-{time.monotonic_ns()}.jsonl"
        self.process = EmulatorProcess([*fixed_timing_args(ttft_ms, itl_ms, self.ground_truth),
                                        *flags])
        self.process.start()
        self.port = self.process.port
        self.base_url = self.process.base_url

    def truth_rows(self) -> list[dict]:
        """Every ground-truth line, the probe's (no request id) included."""
        if not self.ground_truth.exists():
            return []
        return [json.loads(x) for x in self.ground_truth.read_text().splitlines() if x.strip()]

    def truth(self) -> dict[str, dict]:
        """Ground truth by request id (the run's requests only)."""
        return {r["request_id"]: r for r in self.truth_rows() if r["request_id"]}

    def stop(self) -> None:
        self.process.stop()


def sse_events(resp: httpx.Response) -> list[str]:
    """The `data:` payloads of an SSE response, in order."""
    return [line[len("data: "):] for line in resp.iter_lines() if line.startswith("data: ")]


def stream(base: str, path: str, body: dict, headers: dict | None = None) -> tuple[httpx.Response, list]:
    """POST a streaming request; returns the response and the parsed JSON events + "[DONE]"."""
    with control.client(timeout=30) as client:
        with client.stream("POST", base + path, json=body, headers=headers or {}) as resp:
            raw = sse_events(resp)
    return resp, [e if e == "[DONE]" else json.loads(e) for e in raw]


def content_chunks(events: list, chat: bool) -> list[dict]:
    """Chunks that carry generated text."""
    out = []
    for e in events:
        if e == "[DONE]" or not e["choices"]:
            continue
        c = e["choices"][0]
        text = c["delta"].get("content") if chat else c["text"]
        if text:
            out.append(e)
    return out
