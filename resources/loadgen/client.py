"""The streaming hot path: one OpenAI-compatible request over aiohttp, SSE parsed at byte level.

Per chunk the parser does a byte split and, when the server streams cumulative usage,
one regex search for `"completion_tokens":N` - no JSON decode. Only chunks without usage
(servers that do not support `continuous_usage_stats`), and any chunk the fast path does
not fully recognise, are decoded and checked field by field. Every timestamp is
`perf_counter_ns` at the moment the bytes were read.

Whatever the server sends, `send` ends within its timeouts with a status: bytes it cannot
parse, wrong JSON types and counts out of range are `protocol_error`, and so is any
unexpected exception, so a worker never dies silently.
"""

from __future__ import annotations

import asyncio
import json
import re
import time

import aiohttp

from resources.loadgen.redact import short_error

# No model's context comes near 2^31 tokens: a larger count is a server fault, and the
# bound keeps every int64 sum downstream far from overflow. The fast-path regexes take at
# most 10 digits followed by the end of the value, so a longer, negative or fractional
# number falls through to the checked slow path.
MAX_TOKENS = (1 << 31) - 1
MAX_EVENT_BYTES = 1 << 20  # one SSE event; a longer one is a protocol_error
_COMPLETION = re.compile(rb'"completion_tokens"\s*:\s*(\d{1,10})\s*[,}]')
_PROMPT = re.compile(rb'"prompt_tokens"\s*:\s*(\d{1,10})\s*[,}]')
_CACHED = re.compile(rb'"cached_tokens"\s*:\s*(\d{1,10})\s*[,}]')
_now = time.perf_counter_ns
# Error text keeps this much of what the server sent: redaction runs on all of it before
# the message is cut to its short length, so a secret is never cut in half first.
_SNIP = 1024


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


class Malformed(Exception):
    """The server's bytes are not a valid OpenAI stream: the request is a protocol_error."""


def fail(req: Request, exc: BaseException, secrets: tuple[str, ...] = ()) -> None:
    """Record an unexpected exception as a protocol_error (the worker goes on)."""
    now = _now()
    if req.sent is None:
        req.sent = now
    req.finished = now
    req.status = "protocol_error"
    req.error = short_error(f"unexpected {type(exc).__name__}: {exc}", secrets)


def _count(value, name: str) -> int:
    if type(value) is not int or not 0 <= value <= MAX_TOKENS:
        raise Malformed(f"usage.{name} is not a token count: {str(value)[:40]}")
    return value


def _has_content(obj: dict) -> bool:
    choices = obj.get("choices")
    if choices is None:
        return False
    if not isinstance(choices, list):
        raise Malformed(f"choices is a {type(choices).__name__}, not a list")
    found = False
    for choice in choices:
        if not isinstance(choice, dict):
            raise Malformed(f"a choice is a {type(choice).__name__}, not an object")
        text = choice.get("text")
        delta = choice.get("delta") or choice.get("message")
        if delta is not None and not isinstance(delta, dict):
            raise Malformed(f"choice delta is a {type(delta).__name__}, not an object")
        parts = [text] + ([delta.get("content"), delta.get("reasoning_content"),
                           delta.get("reasoning")] if delta else [])
        for part in parts:
            if part is not None and not isinstance(part, str):
                raise Malformed(f"choice content is a {type(part).__name__}, not a string")
            found = found or bool(part)
    return found


def _add_usage(req: Request, total: int, at: int) -> None:
    """One cumulative `completion_tokens`: the increase is this chunk's token count."""
    req.usage_total = total
    if req.no_usage_content:
        return  # a usage-only final chunk after content streamed without usage
    delta = total - req.usage_cum
    if delta > 0:
        req.usage_cum = total
        req.chunk_at.append(at)
        req.chunk_tokens.append(delta)
    elif delta < 0:
        raise Malformed(f"usage.completion_tokens went down from {req.usage_cum} to {total}")


def _on_data(req: Request, payload: bytes, at: int) -> bool:
    """Handle one `data:` payload; True on `[DONE]`."""
    if payload == b"[DONE]":
        return True
    m = _COMPLETION.search(payload)
    if m is not None and payload[:1] == b"{" and payload[-1:] == b"}":
        if req.input_tokens is None and b'"prompt_tokens"' in payload:
            p = _PROMPT.search(payload)
            if p is None:
                return _on_json(req, payload, at)  # a prompt count the fast path cannot read
            req.input_tokens = _count(int(p.group(1)), "prompt_tokens")
            if b'"cached_tokens"' in payload:
                c = _CACHED.search(payload)
                if c is None:
                    return _on_json(req, payload, at)  # a cached count the fast path cannot read
                req.cached_tokens = _count(int(c.group(1)), "cached_tokens")
        if req.text is not None:
            _keep_text(req, payload)
        total = int(m.group(1))  # the regex admits 0..9_999_999_999 only
        if total > MAX_TOKENS:
            raise Malformed(f"usage.completion_tokens is not a token count: {total}")
        req.usage_total = total
        if req.no_usage_content:
            return False  # a usage-only final chunk after content streamed without usage
        delta = total - req.usage_cum
        if delta > 0:
            req.usage_cum = total
            req.chunk_at.append(at)
            req.chunk_tokens.append(delta)
        elif delta < 0:
            raise Malformed(f"usage.completion_tokens went down from {req.usage_cum} to {total}")
        return False
    return _on_json(req, payload, at)


def _on_json(req: Request, payload: bytes, at: int) -> bool:
    try:
        obj = json.loads(payload)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past the stack
        raise Malformed(f"malformed SSE data: {payload[:_SNIP]!r}") from None
    if not isinstance(obj, dict):
        raise Malformed(f"malformed SSE data: {payload[:_SNIP]!r}")
    if "error" in obj:
        err = obj["error"]
        raise Malformed("server error in stream: " + str(err.get("message") if isinstance(err, dict) else err)[:_SNIP])
    usage = obj.get("usage")
    if usage is not None and not isinstance(usage, dict):
        raise Malformed(f"usage is a {type(usage).__name__}, not an object")
    total = prompt = cached = None
    if usage:
        if usage.get("completion_tokens") is not None:
            total = _count(usage["completion_tokens"], "completion_tokens")
        if usage.get("prompt_tokens") is not None:
            prompt = _count(usage["prompt_tokens"], "prompt_tokens")
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and details.get("cached_tokens") is not None:
            cached = _count(details["cached_tokens"], "cached_tokens")
    content = _has_content(obj)  # every field checked before any is kept
    if req.text is not None:
        req.text.append(_content(obj))
    if prompt is not None and req.input_tokens is None:
        req.input_tokens = prompt
    if cached is not None:
        req.cached_tokens = cached
    if total is not None and not content:
        _add_usage(req, total, at)  # a cumulative-usage chunk the fast path did not take
        return False
    if content:
        req.no_usage_content = True
        req.chunk_at.append(at)
        req.chunk_tokens.append(1)
    if total is not None:
        req.usage_total = total
    return False


def _content(obj: dict) -> str:
    """The answer text of one chunk (multi-turn keeps it for the next turn's history);
    anything that is not text is skipped, never trusted."""
    parts = []
    choices = obj.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        if not isinstance(choice, dict):
            continue
        if isinstance(choice.get("text"), str):
            parts.append(choice["text"])
        delta = choice.get("delta") or choice.get("message")
        if isinstance(delta, dict) and isinstance(delta.get("content"), str):
            parts.append(delta["content"])
    return "".join(parts)


def _keep_text(req: Request, payload: bytes) -> None:
    try:
        obj = json.loads(payload)
    except (ValueError, RecursionError):
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
                   total_deadline: float, secrets: tuple[str, ...]) -> None:
    # The common read holds whole events: they are cut straight from `data`. Only a
    # partial event waits in `buf`, a bytearray that grows in place; the separator search
    # resumes where the last one stopped, so an event that trickles in is scanned once.
    buf = bytearray()
    scan = 0
    cr = False  # the last read ended in "\r": its "\n" may start the next one
    done = False
    first_seen = False
    content = resp.content
    while not done:
        data = await content.readany()
        if not data:
            break
        at = _now()
        if cr or b"\r" in data:
            if cr:
                data = b"\r" + data
            cr = data[-1:] == b"\r"
            data = data.replace(b"\r\n", b"\n")[:-1] if cr else data.replace(b"\r\n", b"\n")
        if buf:
            buf += data
            data = buf
        start = 0
        while True:
            i = data.find(b"\n\n", scan)
            if i < 0:
                break
            done = _on_event(req, data[start:i], at)
            start = scan = i + 2
            if done:
                break
        if done:
            break
        if data is buf:
            if start:
                del buf[:start]  # O(1): a bytearray drops its head by moving its start
            scan = len(buf) - 1 if buf else 0
        elif start < len(data):
            buf = bytearray(memoryview(data)[start:])
            scan = len(buf) - 1
        else:
            scan = 0  # the common read: whole events only, nothing left over
        if scan >= MAX_EVENT_BYTES:
            raise Malformed(f"an SSE event exceeds {MAX_EVENT_BYTES} bytes without ending")
        if not first_seen and req.chunk_at:
            first_seen = True
            tm.reschedule(total_deadline)
    n = len(req.chunk_at)
    if done:
        if n:
            req.status = "ok"
        else:
            req.status, req.error = "protocol_error", "empty completion: [DONE] with no output token"
        return
    tail = bytes(buf).strip()
    if tail.startswith(b"data:"):
        try:
            json.loads(tail[5:].strip())
        except (ValueError, RecursionError):
            req.status, req.error = "protocol_error", short_error(f"malformed SSE data at end of stream: {tail[5:_SNIP]!r}", secrets)
            return
    req.status, req.error = "disconnect", f"stream ended without [DONE] after {n} chunks"


async def _on_headers_sent(session, ctx, params) -> None:
    ctx.trace_request_ctx.sent = _now()


def trace_config() -> aiohttp.TraceConfig:
    """Marks `sent_at` when the request is handed to an open connection (after any connect)."""
    tc = aiohttp.TraceConfig()
    tc.on_request_headers_sent.append(_on_headers_sent)
    return tc


def _stream_type(resp: aiohttp.ClientResponse) -> str | None:
    """Why a 200 answer is not an event stream (None when it is, or does not say)."""
    ctype = resp.headers.get("Content-Type")
    if ctype is None or ctype.split(";")[0].strip().lower() == "text/event-stream":
        return None
    return f"HTTP 200 with Content-Type {ctype[:_SNIP]!r}, not text/event-stream"


async def send(session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str],
               req: Request, first_token_timeout_s: float, total_timeout_s: float,
               secrets: tuple[str, ...] = ()) -> Request:
    """Send one streaming request and fill `req`; never raises but CancelledError.

    On cancellation `req` is filled (`cancelled`) before the CancelledError goes on, so
    the caller records it and a cancelled worker stops. The session should carry
    `trace_config()` so that `sent_at` excludes connection setup.
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
                why = _stream_type(resp)
                if why is not None:
                    raise Malformed(why)
                await _consume(resp, req, tm, total_deadline, secrets)
    except TimeoutError:
        req.status = "timeout"
        if req.chunk_at:
            req.error = f"total timeout: not finished within {total_timeout_s:g} s"
        elif loop.time() >= total_deadline - 1e-3:
            req.error = f"total timeout: no first token within {total_timeout_s:g} s"
        else:
            req.error = f"first-token timeout: no output token within {first_token_timeout_s:g} s"
    except Malformed as exc:
        req.status, req.error = "protocol_error", short_error(str(exc), secrets)
    except aiohttp.ConnectionTimeoutError as exc:
        req.status, req.error = "timeout", short_error(f"connect timeout: {exc}", secrets)
    except aiohttp.ClientConnectorError as exc:
        req.status, req.error = "disconnect", short_error(f"connect failed: {exc}", secrets)
    except aiohttp.ClientResponseError as exc:  # a status line or header that does not parse
        req.status = "protocol_error"
        req.error = short_error(f"unparseable HTTP response: {exc.message}", secrets)
    except aiohttp.ClientPayloadError as exc:
        req.status, req.error = _payload_error(exc, len(req.chunk_at), secrets)
    except (aiohttp.ClientError, ConnectionError, OSError) as exc:
        req.status = "disconnect"
        req.error = short_error(f"connection lost after {len(req.chunk_at)} chunks: {type(exc).__name__}: {exc}", secrets)
    except asyncio.CancelledError:
        req.status, req.error = "cancelled", "cancelled: still in flight when the step's drain timed out"
        raise
    except Exception as exc:  # noqa: BLE001 - whatever it was, the request is recorded
        fail(req, exc, secrets)
    finally:
        req.finished = _now()
    return req


def _payload_error(exc: aiohttp.ClientPayloadError, n: int, secrets) -> tuple[str, str]:
    # A body cut short is a disconnect; a chunked framing that does not parse is the
    # server speaking broken HTTP.
    cause = exc.__cause__ or exc.__context__
    text = f"{type(cause).__name__ if cause else ''} {exc}"
    if "TransferEncodingError" in text and "not completed" not in text.lower():
        return "protocol_error", short_error(f"broken chunked encoding after {n} chunks: {exc}", secrets)
    return "disconnect", short_error(f"connection lost after {n} chunks: {type(exc).__name__}: {exc}", secrets)


def _error_message(body: bytes) -> str:
    try:
        obj = json.loads(body)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)
    except (ValueError, RecursionError):
        return body.decode("utf-8", "replace")
