"""The streaming hot path: OpenAI-compatible requests on an asyncio Protocol, timed at the socket.

A `Pool` keeps keep-alive connections to one endpoint (http, or https through the event
loop's TLS), opened on demand within the connect timeout and reused last-in first-out. Each
connection is an `asyncio.Protocol`: its response is parsed by httptools (the C HTTP/1.1
parser behind uvicorn) and split into SSE events inside `data_received`, so a chunk's time is
`perf_counter_ns` taken when its bytes arrived - not when a coroutine woken by them got its
turn, one event-loop turn later, after every other stream that was ready. `sent_at` is taken
as the request's bytes are handed to the transport of an open connection: connection setup
counts as the client's own lateness (`sched_lag`), never as server TTFT.

Per chunk the parser does a byte split and, when the server streams cumulative usage,
one regex search for `"completion_tokens":N` - no JSON decode. Only chunks without usage
(servers that do not support `continuous_usage_stats`), and any chunk the fast path does
not fully recognise, are decoded and checked field by field.

Whatever the server sends, `send` ends within its timeouts (connect, first token, total)
with a status: a head, framing or stream it cannot parse, wrong JSON types and counts out
of range are `protocol_error`, and so is any unexpected exception, so a worker never dies
silently. Every error text is redacted. A connection is reused only after a whole, clean
answer that the server said may be kept alive; anything else closes it.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import ssl
import time
from urllib.parse import quote, urlsplit

import httptools

from resources.loadgen.redact import short_error

# No model's context comes near 2^31 tokens: a larger count is a server fault, and the
# bound keeps every int64 sum downstream far from overflow. The fast-path regexes take at
# most 10 digits followed by the end of the value, so a longer, negative or fractional
# number falls through to the checked slow path.
MAX_TOKENS = (1 << 31) - 1
MAX_EVENT_BYTES = 1 << 20  # one SSE event; a longer one is a protocol_error
MAX_HEAD_BYTES = 1 << 16  # a response's status line and headers; more is a protocol_error
ERROR_BODY_BYTES = 4096  # what a non-200 answer's error text is read from
DRAIN_S = 10.0  # after [DONE], the rest of the response must come within this to keep the connection
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
        "chunk_reasoning", "reasoning_usage", "input_images",
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
        # reasoning models: one byte per chunk (1: a reasoning delta), None until the first
        # reasoning chunk; and the server's usage.completion_tokens_details.reasoning_tokens
        self.chunk_reasoning: bytearray | None = None
        self.reasoning_usage: int | None = None
        self.input_images: int | None = None  # images sent in the prompt

    # --- derived at record time -------------------------------------------------------
    @property
    def output_tokens_source(self) -> str:
        return "chunks" if self.no_usage_content or self.usage_total is None else "usage"

    @property
    def output_tokens(self) -> int | None:
        if self.output_tokens_source == "usage":
            return self.usage_total
        return len(self.chunk_at) if self.chunk_at or self.status == "ok" else None

    @property
    def reasoning_tokens_total(self) -> int | None:
        """contract §2.2: the server's count, else the reasoning chunks' tokens, else null."""
        if self.reasoning_usage is not None:
            return self.reasoning_usage
        flags = self.chunk_reasoning
        if flags is None:
            return None
        return sum(t for t, r in zip(self.chunk_tokens, flags, strict=False) if r)

    @property
    def first_answer_at(self) -> int | None:
        """The first chunk carrying answer (not reasoning) tokens; without reasoning, the
        first chunk."""
        flags = self.chunk_reasoning
        if flags is None:
            return self.chunk_at[0] if self.chunk_at else None
        i = flags.find(0)
        return self.chunk_at[i] if 0 <= i < len(self.chunk_at) else None


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


REASONING_FIELDS = ("reasoning_content", "reasoning")  # vLLM's older and newer spelling


def _has_content(obj: dict) -> tuple[bool, bool]:
    """(answer, reasoning): whether the chunk carries answer text, and reasoning text (a
    `reasoning_content` or `reasoning` string, in a chat delta or beside a completion's
    text, as vLLM's and SGLang's reasoning parsers send it). Every field is type-checked."""
    choices = obj.get("choices")
    if choices is None:
        return False, False
    if not isinstance(choices, list):
        raise Malformed(f"choices is a {type(choices).__name__}, not a list")
    answer = reasoning = False
    for choice in choices:
        if not isinstance(choice, dict):
            raise Malformed(f"a choice is a {type(choice).__name__}, not an object")
        delta = choice.get("delta") or choice.get("message")
        if delta is not None and not isinstance(delta, dict):
            raise Malformed(f"choice delta is a {type(delta).__name__}, not an object")
        for where in (choice, delta or {}):
            for key in ("text", "content", *REASONING_FIELDS):
                part = where.get(key)
                if part is not None and not isinstance(part, str):
                    raise Malformed(f"choice {key} is a {type(part).__name__}, not a string")
                if part:
                    if key in REASONING_FIELDS:
                        reasoning = True
                    else:
                        answer = True
    return answer, reasoning


def _add_chunk(req: Request, at: int, tokens: int, reasoning: bool) -> None:
    """One content chunk; its kind is kept once the request has streamed any reasoning."""
    req.chunk_at.append(at)
    req.chunk_tokens.append(tokens)
    if req.chunk_reasoning is not None:
        req.chunk_reasoning.append(reasoning)
    elif reasoning:  # the first reasoning chunk: every chunk before it was an answer
        req.chunk_reasoning = bytearray(len(req.chunk_at) - 1)
        req.chunk_reasoning.append(1)


def _add_usage(req: Request, total: int, at: int, reasoning: bool = False) -> None:
    """One cumulative `completion_tokens`: the increase is this chunk's token count."""
    req.usage_total = total
    if req.no_usage_content:
        return  # a usage-only final chunk after content streamed without usage
    delta = total - req.usage_cum
    if delta > 0:
        req.usage_cum = total
        _add_chunk(req, at, delta, reasoning)
    elif delta < 0:
        raise Malformed(f"usage.completion_tokens went down from {req.usage_cum} to {total}")


def _on_data(req: Request, payload: bytes, at: int) -> bool:
    """Handle one `data:` payload; True on `[DONE]`."""
    if payload == b"[DONE]":
        return True
    if b'"reasoning' in payload:  # a reasoning model's chunk: which kind it is needs JSON
        return _on_json(req, payload, at)
    m = _COMPLETION.search(payload)
    if m is not None and payload[:1] == b"{" and payload[-1:] == b"}":
        if req.input_tokens is None and b'"prompt_tokens"' in payload:
            p = _PROMPT.search(payload)
            if p is None or b'"image' in payload:  # a count the fast path cannot read or check
                return _on_json(req, payload, at)
            req.input_tokens = _count(int(p.group(1)), "prompt_tokens")
            if b'"cached_tokens"' in payload:
                c = _CACHED.search(payload)
                if c is None:
                    return _on_json(req, payload, at)  # a cached count the fast path cannot read
                req.cached_tokens = _count(int(c.group(1)), "cached_tokens")
        if req.text is not None:
            _keep_text(req, payload)
        # _add_usage written out: this is the per-event hot path, where the call itself
        # was measurable side by side (docs/reliability.md, "Cost on the hot path")
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
            if req.chunk_reasoning is not None:  # an answer chunk after reasoning ones
                req.chunk_reasoning.append(0)
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
    total = prompt = cached = thought = None
    if usage:
        if usage.get("completion_tokens") is not None:
            total = _count(usage["completion_tokens"], "completion_tokens")
        if usage.get("prompt_tokens") is not None:
            prompt = _count(usage["prompt_tokens"], "prompt_tokens")
        details = usage.get("prompt_tokens_details")
        if details is not None and not isinstance(details, dict):
            raise Malformed(f"usage.prompt_tokens_details is a {type(details).__name__}")
        if details and details.get("cached_tokens") is not None:
            cached = _count(details["cached_tokens"], "cached_tokens")
        if details and details.get("image_tokens") is not None:  # checked, not recorded
            _count(details["image_tokens"], "prompt_tokens_details.image_tokens")
        out = usage.get("completion_tokens_details")
        if out is not None and not isinstance(out, dict):
            raise Malformed(f"usage.completion_tokens_details is a {type(out).__name__}")
        if out and out.get("reasoning_tokens") is not None:
            thought = _count(out["reasoning_tokens"], "completion_tokens_details.reasoning_tokens")
    answer, reasoning = _has_content(obj)  # every field checked before any is kept
    if req.text is not None:
        req.text.append(_content(obj))
    if prompt is not None and req.input_tokens is None:
        req.input_tokens = prompt
    if cached is not None:
        req.cached_tokens = cached
    if thought is not None:
        req.reasoning_usage = thought
    # a chunk with any answer text is an answer chunk (its first token may follow reasoning
    # in the same delta); one with reasoning text only is a reasoning chunk
    thinking = reasoning and not answer
    if total is not None and (not req.no_usage_content or not (answer or reasoning)):
        _add_usage(req, total, at, thinking)  # a cumulative-usage chunk
        return False
    if answer or reasoning:
        req.no_usage_content = True
        _add_chunk(req, at, 1, thinking)
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


class Events:
    """The SSE split of one response body, fed as its bytes arrive.

    The common read holds whole events: they are cut straight from the bytes. Only a partial
    event waits in `buf`, a bytearray that grows in place; the separator search resumes
    where the last one stopped, so an event that trickles in is scanned once.
    """

    __slots__ = ("req", "buf", "scan", "cr", "done")

    def __init__(self, req: Request) -> None:
        self.req = req
        self.buf = bytearray()
        self.scan = 0
        self.cr = False  # the last piece ended in "\r": its "\n" may start the next one
        self.done = False

    def feed(self, data: bytes, at: int) -> bool:
        """Count the events completed by `data` (read at `at`); True once `[DONE]` is seen.
        Raises Malformed for bytes that are not an OpenAI stream."""
        if self.cr or b"\r" in data:
            if self.cr:
                data = b"\r" + data
            self.cr = data[-1:] == b"\r"
            data = data.replace(b"\r\n", b"\n")[:-1] if self.cr else data.replace(b"\r\n", b"\n")
        buf = self.buf
        if buf:
            buf += data
            data = buf
        req, start, scan = self.req, 0, self.scan
        while True:
            i = data.find(b"\n\n", scan)
            if i < 0:
                break
            done = _on_event(req, data[start:i], at)
            start = scan = i + 2
            if done:
                self.done = True
                return True
        if data is buf:
            if start:
                del buf[:start]  # O(1): a bytearray drops its head by moving its start
            self.scan = len(buf) - 1 if buf else 0
        elif start < len(data):
            self.buf = bytearray(memoryview(data)[start:])
            self.scan = len(self.buf) - 1
        else:
            self.scan = 0  # the common read: whole events only, nothing left over
        if self.scan >= MAX_EVENT_BYTES:
            raise Malformed(f"an SSE event exceeds {MAX_EVENT_BYTES} bytes without ending")
        return False

    def close(self, secrets: tuple[str, ...]) -> None:
        """The body is over: set the request's status from what the stream said."""
        req = self.req
        n = len(req.chunk_at)
        if self.done:
            if n:
                req.status = "ok"
            else:
                req.status, req.error = "protocol_error", "empty completion: [DONE] with no output token"
            return
        tail = bytes(self.buf).strip()
        if tail.startswith(b"data:"):
            try:
                json.loads(tail[5:].strip())
            except (ValueError, RecursionError):
                req.status, req.error = "protocol_error", short_error(
                    f"malformed SSE data at end of stream: {tail[5:_SNIP]!r}", secrets)
                return
        req.status, req.error = "disconnect", f"stream ended without [DONE] after {n} chunks"


class ConnectTimeout(Exception):
    """No connection within the connect timeout."""


class _Exchange:
    """One request on one connection: the httptools parser's callbacks fill the request as
    the bytes arrive, inside the protocol's `data_received`; `waiter` is resolved when the
    request has its status. Once resolved it never touches the request again; it only
    decides whether the connection can carry the next one."""

    __slots__ = ("conn", "req", "waiter", "tm", "total_deadline", "secrets", "parser", "events",
                 "at", "head_bytes", "headers_done", "ctype", "framed", "error_body", "complete", "keep_alive",
                 "timed", "resolved", "by_stream", "drain_timer")

    def __init__(self, conn: _Conn, req: Request, waiter: asyncio.Future, tm: asyncio.Timeout,
                 total_deadline: float, secrets: tuple[str, ...]) -> None:
        self.conn, self.req, self.waiter, self.tm = conn, req, waiter, tm
        self.total_deadline, self.secrets = total_deadline, secrets
        self.parser = httptools.HttpResponseParser(self)
        self.events = Events(req)
        self.at = 0
        self.head_bytes = 0
        self.headers_done = False
        self.ctype: bytes | None = None
        self.framed = False  # Content-Length or chunked: the body's end is in the bytes
        self.error_body: bytearray | None = None  # a non-200 answer's first bytes
        self.complete = False  # the parser saw the end of the response
        self.keep_alive = False
        self.timed = False  # the first token came: the total timeout is the one that runs
        self.resolved = False
        self.by_stream = False  # resolved from the server's bytes (not a timeout or a cancel)
        self.drain_timer: asyncio.TimerHandle | None = None

    # --- httptools callbacks (may raise; feed_data re-raises them wrapped) ------------
    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-type":
            self.ctype = value
        elif name == b"x-servingbench-emulated":
            if value.strip() == b"1":
                self.req.emulated = True
        elif name in (b"content-length", b"transfer-encoding"):
            self.framed = True

    def on_headers_complete(self) -> None:
        self.headers_done = True
        req = self.req
        req.http_status = status = self.parser.get_status_code()
        ctype = self.ctype
        if status != 200:
            self.error_body = bytearray()
        elif ctype and ctype.split(b";")[0].strip().lower() != b"text/event-stream":
            raise Malformed(f"HTTP 200 with Content-Type {ctype[:_SNIP].decode('latin-1')!r}, "
                            "not text/event-stream")

    def on_body(self, body: bytes) -> None:
        if self.resolved or self.events.done:
            return  # what follows [DONE], or an answer already judged: drained, not read
        if self.error_body is not None:
            self.error_body += body[:ERROR_BODY_BYTES - len(self.error_body)]
        else:
            self.events.feed(body, self.at)

    def on_message_begin(self) -> None:
        if self.complete:  # bytes after the end of the answer: the connection is not reused
            self.keep_alive = False

    def on_message_complete(self) -> None:
        if self.complete:
            return
        self.complete = True
        # asked here: once feed_data returns, the parser has moved on to the next message
        self.keep_alive = self.parser.should_keep_alive()

    # --- driven by the connection ---------------------------------------------------
    def start(self, message: bytes) -> None:
        req = self.req
        req.sent = _now()  # handed to the transport: no byte of it can be answered yet
        transport = self.conn.transport
        if transport.is_closing():  # closed since it was picked (uvloop would raise on write)
            req.status, req.error = "disconnect", "connection lost before the request was sent"
            return self._resolve(req.sent, reuse=False)
        transport.write(message)

    def received(self, data: bytes, at: int) -> None:
        self.at = at
        req = self.req
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            inner = exc.__context__
            if self.resolved:
                return self.conn.abort()
            if isinstance(inner, Malformed):
                req.status, req.error = "protocol_error", short_error(str(inner), self.secrets)
            else:
                fail(req, inner if inner is not None else exc, self.secrets)
            return self._resolve(at, reuse=False)
        except httptools.HttpParserError as exc:
            if self.resolved:
                return self.conn.abort()  # junk after the end: the connection is not reused
            req.status = "protocol_error"
            if not self.headers_done:
                req.error = short_error(f"unparseable HTTP response: {exc}", self.secrets)
            else:
                req.error = short_error(f"broken HTTP body framing after {len(req.chunk_at)} "
                                        f"chunks: {exc}", self.secrets)
            return self._resolve(at, reuse=False)
        if self.resolved:  # draining what followed [DONE]
            if self.complete:
                self._release()
            return
        if not self.headers_done:
            self.head_bytes += len(data)
            if self.head_bytes > MAX_HEAD_BYTES:
                req.status = "protocol_error"
                req.error = f"the HTTP response head exceeds {MAX_HEAD_BYTES} bytes"
                self._resolve(at, reuse=False)
            return
        if self.error_body is not None:
            if self.complete or len(self.error_body) >= ERROR_BODY_BYTES:
                self._http_error()
                self._resolve(at, reuse=self.complete)
            return
        if self.events.done:
            self.events.close(self.secrets)
            return self._resolve(at, reuse=True)
        if self.complete:
            self.events.close(self.secrets)
            return self._resolve(at, reuse=False)
        if not self.timed and req.chunk_at:
            self.timed = True
            if not self.tm.expired():
                self.tm.reschedule(self.total_deadline)

    def lost(self, exc: BaseException | None) -> None:
        """The connection closed (by the server, the network or an abort of ours)."""
        if self.resolved:
            return
        req = self.req
        at = _now()
        why = f"{type(exc).__name__}: {exc}" if exc is not None else "closed by the server"
        if not self.headers_done:
            req.status = "disconnect"
            req.error = short_error(f"connection lost before the response headers: {why}", self.secrets)
        elif self.error_body is not None:
            self._http_error()
        elif not self.framed and exc is None:  # a body that ends with the connection
            self.events.close(self.secrets)
        else:
            req.status = "disconnect"
            req.error = short_error(f"connection lost after {len(req.chunk_at)} chunks: {why}", self.secrets)
        self._resolve(at, reuse=False)

    def abandon(self) -> None:
        """The request ended without the stream (timeout, cancellation, an exception):
        the connection is closed, as it may still carry the rest of the answer."""
        if not self.resolved:
            self.resolved = True
            self.conn.abort()

    def _http_error(self) -> None:
        req = self.req
        req.status = "http_error"
        req.error = short_error(f"HTTP {req.http_status}: {_error_message(bytes(self.error_body))}",
                                self.secrets)

    def _resolve(self, at: int, reuse: bool) -> None:
        self.resolved = self.by_stream = True
        self.req.finished = at
        if not self.waiter.done():
            self.waiter.set_result(None)
        if not reuse:
            self.conn.abort()
        elif self.complete:
            self._release()
        else:  # [DONE] came before the end of the response: read on to it, but not forever
            self.drain_timer = asyncio.get_running_loop().call_later(DRAIN_S, self.conn.abort)

    def _release(self) -> None:
        if self.drain_timer is not None:
            self.drain_timer.cancel()
        if self.keep_alive:
            self.conn.release()
        else:
            self.conn.abort()


class _Conn(asyncio.Protocol):
    """One keep-alive connection of the pool. Every byte is timed here, in `data_received`,
    before anything else runs: the time a chunk is stamped with is when its bytes arrived,
    not when some coroutine got round to it."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.ex: _Exchange | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.pool.conns.add(self)

    def data_received(self, data: bytes) -> None:
        at = _now()
        ex = self.ex
        if ex is None:
            self.abort()  # bytes no request asked for: the connection cannot be trusted
            return
        try:
            ex.received(data, at)
        except Exception as exc:  # noqa: BLE001 - the request is recorded, the loop goes on
            if not ex.resolved:
                fail(ex.req, exc, ex.secrets)
                ex._resolve(_now(), reuse=False)
            self.abort()

    def eof_received(self) -> bool:
        return False  # close: a half-closed connection is never reused

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.conns.discard(self)
        ex, self.ex = self.ex, None
        if ex is not None:
            try:
                ex.lost(exc)
            except Exception as err:  # noqa: BLE001
                if not ex.resolved:
                    fail(ex.req, err, ex.secrets)
                    ex._resolve(_now(), reuse=False)

    def abort(self) -> None:
        self.closed = True
        self.ex = None
        if self.transport is not None:
            self.transport.abort()

    def release(self) -> None:
        self.ex = None
        if not self.closed and not self.transport.is_closing():
            self.pool.idle.append(self)


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
_FRAMING = frozenset(("content-length", "transfer-encoding"))


class Pool:
    """Keep-alive connections to one endpoint (http or https), opened on demand and reused
    last-in first-out; use as `async with Pool(url, connect_timeout_s) as pool`."""

    def __init__(self, url: str, connect_timeout_s: float,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        tls = parts.scheme == "https"
        self.origin = (parts.scheme, parts.netloc)
        self.host = parts.hostname
        self.port = parts.port or (443 if tls else 80)
        host = self.host if self.host.isascii() else self.host.encode("idna").decode("ascii")
        host = f"[{host}]" if ":" in host else host
        self.host_header = host if parts.port in (None, 443 if tls else 80) else f"{host}:{self.port}"
        self.host_line = f"Host: {self.host_header}\r\n".encode("ascii")
        self.ssl = (ssl_context or ssl.create_default_context()) if tls else None
        self.connect_timeout_s = connect_timeout_s
        self.idle: list[_Conn] = []
        self.conns: set[_Conn] = set()
        self._addrs: list[tuple] | None = None
        self._paths: dict[str, bytes] = {}

    async def __aenter__(self) -> Pool:
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for conn in list(self.conns):
            conn.abort()
        self.idle.clear()

    def message(self, url: str, headers: dict[str, str], body: bytes) -> bytes:
        """The request's bytes: a POST of `body` with `headers` (they may replace the
        defaults, never the framing); a header that would break the framing is refused."""
        path = self._paths.get(url)
        if path is None:
            parts = urlsplit(url)
            if (parts.scheme, parts.netloc) != self.origin:
                raise ValueError(f"{url!r} is not on this pool's endpoint")
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            path = self._paths[url] = quote(target, safe="/?=&%:@!$'()*+,;~").encode("ascii")
        out = [b"POST ", path, b" HTTP/1.1\r\nContent-Length: %d\r\n" % len(body)]
        given = set()
        for name, value in headers.items():
            low = name.lower()
            if not _TOKEN.match(name) or "\r" in value or "\n" in value or "\0" in value:
                raise ValueError(f"request header {name[:40]!r}: not a valid header name or value")
            if low in _FRAMING:
                continue
            given.add(low)
            out.append(f"{name}: {value}\r\n".encode())
        if "host" not in given:
            out.append(self.host_line)
        for name, value in _DEFAULT_HEADERS:
            if name not in given:
                out.append(value)
        out.append(b"\r\n")
        out.append(body)
        return b"".join(out)

    async def acquire(self) -> _Conn:
        """An idle connection, or a new one within the connect timeout (ConnectTimeout);
        connection errors are OSError."""
        idle = self.idle
        while idle:
            conn = idle.pop()
            if not conn.closed and not conn.transport.is_closing():
                return conn
        loop = asyncio.get_running_loop()
        try:
            return await asyncio.wait_for(self._connect(loop), self.connect_timeout_s)
        except TimeoutError:
            raise ConnectTimeout(f"no connection to {self.host_header} within "
                                 f"{self.connect_timeout_s:g} s") from None

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> _Conn:
        # The address is looked up once per run: a name that moves mid-run would mix servers.
        if self._addrs is None:
            infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
            self._addrs = [(fam, addr) for fam, _, _, _, addr in infos]
        last: OSError | None = None
        for fam, addr in self._addrs:
            try:
                _, conn = await loop.create_connection(
                    lambda: _Conn(self), addr[0], addr[1], family=fam, ssl=self.ssl,
                    server_hostname=self.host if self.ssl is not None else None)
                return conn
            except OSError as exc:
                last = exc
        raise last if last is not None else OSError(f"{self.host}: no address")


_DEFAULT_HEADERS = [(name.lower(), f"{name}: {value}\r\n".encode()) for name, value in (
    ("Content-Type", "application/json"),
    ("Accept", "*/*"),
    # the stream is parsed as it arrives: a compressed one could not be
    ("Accept-Encoding", "identity"),
    ("User-Agent", "servingbench"),
)]


async def send(pool: Pool, url: str, body: bytes, headers: dict[str, str], req: Request,
               first_token_timeout_s: float, total_timeout_s: float,
               secrets: tuple[str, ...] = ()) -> Request:
    """Send one streaming request on `pool` and fill `req`; never raises but CancelledError.

    On cancellation `req` is filled (`cancelled`) before the CancelledError goes on, so
    the caller records it and a cancelled worker stops. `sent_at` excludes connection setup:
    it is taken when the request's bytes are handed to an open connection.
    """
    loop = asyncio.get_running_loop()
    start = loop.time()
    total_deadline = start + total_timeout_s
    req.sent = _now()  # until the bytes are handed to a connection
    ex: _Exchange | None = None
    try:
        message = pool.message(url, headers, body)
        async with asyncio.timeout_at(min(start + first_token_timeout_s, total_deadline)) as tm:
            conn = await pool.acquire()
            waiter = loop.create_future()
            ex = conn.ex = _Exchange(conn, req, waiter, tm, total_deadline, secrets)
            ex.start(message)
            await waiter
    except TimeoutError:
        if ex is None or not ex.by_stream:  # not an answer that beat the timer by a hair
            req.status = "timeout"
            if req.chunk_at:
                req.error = f"total timeout: not finished within {total_timeout_s:g} s"
            elif loop.time() >= total_deadline - 1e-3:
                req.error = f"total timeout: no first token within {total_timeout_s:g} s"
            else:
                req.error = f"first-token timeout: no output token within {first_token_timeout_s:g} s"
    except ConnectTimeout as exc:
        req.status, req.error = "timeout", short_error(f"connect timeout: {exc}", secrets)
    except OSError as exc:  # refused, unreachable, a name that does not resolve, TLS
        req.status = "disconnect"
        req.error = short_error(f"connect failed: {pool.host_header}: {type(exc).__name__}: {exc}", secrets)
    except asyncio.CancelledError:
        if ex is None or not ex.by_stream:
            req.status, req.error = "cancelled", "cancelled: still in flight when the step's drain timed out"
        raise
    except Exception as exc:  # noqa: BLE001 - whatever it was, the request is recorded
        fail(req, exc, secrets)
    finally:
        if ex is not None:
            ex.abandon()
        if ex is None or not ex.by_stream:
            req.finished = _now()
    return req


def _error_message(body: bytes) -> str:
    try:
        obj = json.loads(body)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)
    except (ValueError, RecursionError):
        return body.decode("utf-8", "replace")
