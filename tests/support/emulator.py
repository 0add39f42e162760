"""Small client helpers for the emulator tests (real HTTP on 127.0.0.1)."""

from __future__ import annotations

import json

import httpx

SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
USAGE_OPTS = {"include_usage": True, "continuous_usage_stats": True}


def sse_events(resp: httpx.Response) -> list[str]:
    """The `data:` payloads of an SSE response, in order."""
    return [line[len("data: "):] for line in resp.iter_lines() if line.startswith("data: ")]


def stream(base: str, path: str, body: dict, headers: dict | None = None) -> tuple[httpx.Response, list]:
    """POST a streaming request; returns the response and the parsed JSON events + "[DONE]"."""
    with httpx.Client(timeout=30) as client:
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
