"""The load generator's per-event parsing cost for an answer chunk, a reasoning chunk (both on
the regex fast path) and a chunk carrying both kinds (JSON-decoded to tell them apart):
`python benchmarks/reasoning_parse.py`.

Each figure is the best of 5 passes over 20,000 prebuilt vLLM-shaped chat chunks with
continuous usage, fed to `sse._on_data` as the pool does; the minimum filters out the other
work of a shared machine. Results: docs/workloads.md, "Reasoning models"."""

from __future__ import annotations

import timeit

from servingbench.resources.loadgen import sse
from servingbench.resources.loadgen.records import Request

CHUNK = (b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
         b'"choices":[{"index":0,"delta":{"content":" tokens"},"logprobs":null,'
         b'"finish_reason":null}],"usage":{"prompt_tokens":512,"prompt_tokens_details":'
         b'{"cached_tokens":0},"total_tokens":%d,"completion_tokens":%d}}')
REASONING = CHUNK.replace(b'"content"', b'"reasoning_content"')
BOTH = CHUNK.replace(b'"content"', b'"reasoning_content":" a","content"')


def per_event_ns(payload: bytes, n: int = 20_000) -> float:
    events = [payload % (512 + i, i) for i in range(1, n + 1)]

    def one_pass() -> None:
        req = Request("r", "steady", "c=1", "concurrency", 1.0, 0)
        for i, event in enumerate(events, 1):
            sse._on_data(req, event, i)

    return min(timeit.repeat(one_pass, number=1, repeat=5)) / n * 1e9


if __name__ == "__main__":
    answer, reasoning, both = per_event_ns(CHUNK), per_event_ns(REASONING), per_event_ns(BOTH)
    print(f"answer chunk (fast path):        {answer:,.0f} ns/event")
    print(f"reasoning chunk (fast path):     {reasoning:,.0f} ns/event ({reasoning / answer:.1f}x)")
    print(f"both kinds in one (JSON decoded): {both:,.0f} ns/event ({both / answer:.1f}x)")
