"""The streaming hot path: one OpenAI-compatible request over aiohttp, SSE parsed at byte level.

Per chunk the parser does a byte split and, when the server streams cumulative usage,
one regex search for `"completion_tokens":N` - no JSON decode. Only chunks without usage
(servers that do not support `continuous_usage_stats`) are decoded to see whether they
carry content. Every timestamp is `perf_counter_ns` at the moment the bytes were read.
"""

from __future__ import annotations

import asyncio
import json
import re
import time

import aiohttp

from resources.loadgen.redact import short_error

_COMPLETION = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_PROMPT = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)')
_CACHED = re.compile(rb'"cached_tokens"\s*:\s*(\d+)')
_now = time.perf_counter_ns


class Request:
    """One request's raw observations (perf_counter ns); the recorder maps them to UTC."""

    __slots__ = (
        "request_id", "phase", "step", "load_mode", "target", "scheduled", "sent", "finished",
        "input_tokens", "usage_total", "usage_cum", "no_usage_content", "chunk_at", "chunk_tokens",
        "status", "http_status", "error", "emulated",
        "session_id", "turn", "cached_tokens", "text",
    )

    def __init__(self, request_id: str, phase: str, step: str, load_mode: str, target: float,
                 scheduled: int) -> None:
        self.request_id, self.phase, self.step = request_id, phase, step
        self.load_mode, self.target, self.scheduled = load_mode, target, scheduled
        self.sent = self.finished = None
        self.input_tokens = self.usage_total = None
        self.usage_cum = 0
        self.no_usage_content = False
        self.chunk_at: list[int] = []
        self.chunk_tokens: list[int] = []
        self.status = "cancelled"
        self.http_status = self.error = None
        self.emulated = False
        self.session_id: str | None = None
        self.turn: int | None = None
        self.cached_tokens: int | None = None
        # multi-turn sessions need the answer's text for the next turn's history; None
        # keeps the hot path free of JSON decoding for every other workload
        self.text: list[str] | None = None

    # --- derived at record time -------------------------------------------------------
    @property
    def output_tokens_source(self) -> str:
        return "chunks" if self.no_usage_content or self.usage_total is None else "usage"

    @property
    def output_tokens(self) -> int | None:
        if self.output_tokens_source == "usage":
            return self.usage_total
        return len(self.chunk_at) if self.chunk_at or self.status == "ok" else None


class _Malformed(Exception):
    pass


def _has_content(obj: dict) -> bool:
    for choice in obj.get("choices") or ():
        if choice.get("text"):
            return True
        delta = choice.get("delta") or choice.get("message")
        if delta and (delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")):
            return True
    return False


def _on_data(req: Request, payload: bytes, at: int) -> bool:
    """Handle one `data:` payload; True on `[DONE]`."""
    if payload == b"[DONE]":
        return True
    m = _COMPLETION.search(payload)
    if m is not None and payload[:1] == b"{" and payload[-1:] == b"}":
        total = int(m.group(1))
        req.usage_total = total
        if req.input_tokens is None:
            p = _PROMPT.search(payload)
            if p is not None:
                req.input_tokens = int(p.group(1))
            c = _CACHED.search(payload)
            if c is not None:
                req.cached_tokens = int(c.group(1))
        if req.text is not None:
            _keep_text(req, payload)
        if req.no_usage_content:
            return False  # a usage-only final chunk after content streamed without usage
        delta = total - req.usage_cum
        if delta > 0:
            req.usage_cum = total
            req.chunk_at.append(at)
            req.chunk_tokens.append(delta)
        return False
    try:
        obj = json.loads(payload)
    except ValueError:
        raise _Malformed(f"malformed SSE data: {payload[:60]!r}") from None
    if not isinstance(obj, dict):
        raise _Malformed(f"malformed SSE data: {payload[:60]!r}")
    if "error" in obj:
        err = obj["error"]
        raise _Malformed("server error in stream: " + str(err.get("message") if isinstance(err, dict) else err))
    if req.text is not None:
        req.text.append(_content(obj))
    if _has_content(obj):
        req.no_usage_content = True
        req.chunk_at.append(at)
        req.chunk_tokens.append(1)
    usage = obj.get("usage")
    if isinstance(usage, dict):
        if usage.get("completion_tokens") is not None:
            req.usage_total = int(usage["completion_tokens"])
        if req.input_tokens is None and usage.get("prompt_tokens") is not None:
            req.input_tokens = int(usage["prompt_tokens"])
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            req.cached_tokens = details["cached_tokens"]
    return False


def _content(obj: dict) -> str:
    parts = []
    for choice in obj.get("choices") or ():
        if choice.get("text"):
            parts.append(choice["text"])
        delta = choice.get("delta") or choice.get("message")
        if delta and delta.get("content"):
            parts.append(delta["content"])
    return "".join(parts)


def _keep_text(req: Request, payload: bytes) -> None:
    try:
        obj = json.loads(payload)
    except ValueError:
        return  # the fast path's regex matched a broken chunk: nothing to keep
    if isinstance(obj, dict):
        req.text.append(_content(obj))


def _on_event(req: Request, event: bytes, at: int) -> bool:
    if event[:6] == b"data: " and b"\n" not in event:  # the common one-line event
        return _on_data(req, event[6:].strip(), at)
    done = False
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            done = _on_data(req, line[5:].strip(), at) or done
    return done


async def _consume(resp: aiohttp.ClientResponse, req: Request, tm: asyncio.Timeout,
                   total_deadline: float) -> None:
    buf = b""
    done = False
    first_seen = False
    content = resp.content
    while True:
        data = await content.readany()
        if not data:
            break
        at = _now()
        buf = buf + data if buf else data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        while not done:
            i = buf.find(b"\n\n")
            if i < 0:
                break
            done = _on_event(req, buf[:i], at)
            buf = buf[i + 2:]
        if not first_seen and req.chunk_at:
            first_seen = True
            tm.reschedule(total_deadline)
        if done:
            break
    n = len(req.chunk_at)
    if done:
        if n:
            req.status = "ok"
        else:
            req.status, req.error = "protocol_error", "empty completion: [DONE] with no output token"
        return
    tail = buf.strip()
    if tail.startswith(b"data:"):
        try:
            json.loads(tail[5:].strip())
        except ValueError:
            req.status, req.error = "protocol_error", f"malformed SSE data at end of stream: {tail[5:40]!r}"
            return
    req.status, req.error = "disconnect", f"stream ended without [DONE] after {n} chunks"


async def _on_headers_sent(session, ctx, params) -> None:
    ctx.trace_request_ctx.sent = _now()


def trace_config() -> aiohttp.TraceConfig:
    """Marks `sent_at` when the request is handed to an open connection (after any connect)."""
    tc = aiohttp.TraceConfig()
    tc.on_request_headers_sent.append(_on_headers_sent)
    return tc


async def send(session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str],
               req: Request, first_token_timeout_s: float, total_timeout_s: float,
               secrets: tuple[str, ...] = ()) -> Request:
    """Send one streaming request and fill `req`; never raises except on programming errors.

    The session should carry `trace_config()` so that `sent_at` excludes connection setup.
    """
    loop = asyncio.get_running_loop()
    start = loop.time()
    total_deadline = start + total_timeout_s
    req.sent = _now()  # until the headers go out on a connection (trace_config)
    try:
        async with asyncio.timeout_at(min(start + first_token_timeout_s, total_deadline)) as tm:
            async with session.post(url, data=body, headers=headers, trace_request_ctx=req) as resp:
                req.http_status = resp.status
                if resp.headers.get("x-servingbench-emulated") == "1":
                    req.emulated = True
                if resp.status != 200:
                    text = await resp.content.read(4096)
                    req.status = "http_error"
                    req.error = short_error(f"HTTP {resp.status}: {_error_message(text)}", secrets)
                    return req
                await _consume(resp, req, tm, total_deadline)
    except TimeoutError:
        req.status = "timeout"
        if req.chunk_at:
            req.error = f"total timeout: not finished within {total_timeout_s:g} s"
        elif loop.time() >= total_deadline - 1e-3:
            req.error = f"total timeout: no first token within {total_timeout_s:g} s"
        else:
            req.error = f"first-token timeout: no output token within {first_token_timeout_s:g} s"
    except _Malformed as exc:
        req.status, req.error = "protocol_error", short_error(str(exc), secrets)
    except aiohttp.ConnectionTimeoutError as exc:
        req.status, req.error = "timeout", short_error(f"connect timeout: {exc}", secrets)
    except aiohttp.ClientConnectorError as exc:
        req.status, req.error = "disconnect", short_error(f"connect failed: {exc}", secrets)
    except (aiohttp.ClientError, ConnectionError, OSError) as exc:
        req.status = "disconnect"
        req.error = short_error(f"connection lost after {len(req.chunk_at)} chunks: {type(exc).__name__}: {exc}", secrets)
    except asyncio.CancelledError:
        req.status, req.error = "cancelled", "cancelled: still in flight when the step's drain timed out"
    finally:
        req.finished = _now()
    return req


def _error_message(body: bytes) -> str:
    try:
        obj = json.loads(body)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)
    except ValueError:
        return body.decode("utf-8", "replace")
