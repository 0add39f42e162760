"""A lean HTTP/1.1 server protocol for the hot path: keep-alive, request bodies (Content-Length
or chunked), chunked streaming responses. Requests are parsed by `httptools` (llhttp, the C
parser behind uvicorn); one request is answered at a time per connection, pipelined ones
wait in a short queue. Every response carries the emulated header (unless the server was
started without it, to stand in for an unknown engine).

What a client can make this server hold is bounded: a request head over MAX_HEADER is
answered 431, a head not complete within `head_timeout_s` (HEAD_TIMEOUT_S) 408 and the
connection closed (a half-sent head would otherwise hold it forever), a body not complete
within `body_timeout_s` of its head's end (the same by default) 408 and closed (a trickled
body likewise), a connection with no request under way for `idle_timeout_s` (IDLE_FACTOR ×
the head timeout) closed without a word, as uvicorn's keep-alive timeout does; a body over
MAX_BODY 413, and while a response is in progress the connection
stops reading once MAX_BUFFERED bytes of later requests wait (TCP backpressure, nothing
dropped). Header values echoed back (X-Request-ID) are copied only when they are printable
ASCII, so a CR or LF sent by a client can never split a response header.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus

import httptools

EMULATED_HEADER = b"x-servingbench-emulated: 1\r\n"
MAX_HEADER = 64 * 1024
MAX_BODY = 64 * 1024 * 1024
MAX_BUFFERED = 1024 * 1024  # bytes of pipelined requests held while one is being answered
MAX_PIPELINED = 32
HEAD_TIMEOUT_S = 10.0  # from a request's first byte to the end of its headers
IDLE_FACTOR = 6  # a connection idle 6 head timeouts (60 s by default) is closed
MAX_ECHO = 256  # longest header value copied back into a response
PRINTABLE = re.compile(r"[\x20-\x7e]*")


def echo_value(value: str | None) -> str | None:
    """`value` if it is safe to copy into a response header (printable ASCII, short), else
    None: a value with CR/LF or another control byte is never echoed."""
    if value is None or len(value) > MAX_ECHO or not PRINTABLE.fullmatch(value):
        return None
    return value


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    arrival_perf_ns: int = 0
    extra: dict = field(default_factory=dict)


class WriteBatch:
    """Holds the chunk writes of one engine callback so that each connection gets one
    `transport.write` (one syscall) for all its chunks due at that wake-up; in time, a
    wake-up that finds several tokens of one stream overdue catches up with one write."""

    def __init__(self) -> None:
        self.active = False
        self.dirty: list[HttpConnection] = []

    def begin(self) -> None:
        self.active = True

    def end(self) -> None:
        self.active = False
        for conn in self.dirty:
            conn.flush()
        self.dirty.clear()


BATCH = WriteBatch()


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


class _Reject(Exception):
    """A request this server refuses: answered with `status`, then the connection closes."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class HttpConnection(asyncio.Protocol):
    """Parses requests and hands them to `handler(conn, request)`; the handler answers
    with `respond` or `start_stream` … `write_chunk` … `end_stream` (or `abort`)."""

    def __init__(self, handler: Callable[[HttpConnection, Request], None], clock_ns: Callable[[], int],
                 emulated_header: bool = True, head_timeout_s: float = HEAD_TIMEOUT_S,
                 body_timeout_s: float | None = None, idle_timeout_s: float | None = None):
        self.head_timeout_s = head_timeout_s
        self.body_timeout_s = head_timeout_s if body_timeout_s is None else body_timeout_s
        self.idle_timeout_s = (IDLE_FACTOR * head_timeout_s if idle_timeout_s is None
                               else idle_timeout_s)
        # One timer per connection for every wait a client can drag out (a head, a body, an
        # idle keep-alive): armed for the nearest deadline only when a read leaves a request
        # unfinished, else it wakes once an idle timeout and looks (no timer per request).
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0  # perf ns the timer fires at
        self._idle_since = 0  # perf ns the connection last had no request under way
        self._in_body = False  # the parser is inside a request body
        self._body_start = 0  # perf ns the body's wait began (0: not yet stamped)
        self.handler = handler
        self.clock_ns = clock_ns
        # off (--no-emulated-header): the server looks like an unknown engine to a client
        self.emulated_header = EMULATED_HEADER if emulated_header else b""
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.pending: deque[Request | _Reject] = deque()  # parsed, waiting for their turn
        self.pending_bytes = 0
        self.busy = False
        self.keep_alive = True
        self.closed = False
        self.broken = False  # the parser failed: nothing after it is read
        self.paused = False
        self.on_lost: Callable[[], None] | None = None  # set while a response is in progress
        self.request_id: str | None = None  # echoed back when safe (see echo_value)
        self._dispatching = False
        self._in_head = False  # the parser is inside a request head
        self._head_open = False  # ... one that an earlier read left incomplete
        self._head_read_bytes = 0  # bytes of the reads that continued it
        self._head_bytes = 0  # bytes of its URL and complete header lines
        self._url = b""
        self._headers: dict[str, str] = {}
        self._body = bytearray()
        self._arrival = 0
        self.out: list[bytes] = []  # chunks held by the current write batch
        self.stamps: list[int] = []  # indexes into self.gt waiting for their write time
        self.gt = array("q")  # the current stream's ground truth: (scheduled, written, tokens)*

    # --- asyncio.Protocol ----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._idle_since = self.clock_ns()
        self._arm(self.idle_timeout_s)

    def data_received(self, data: bytes) -> None:
        if self.broken or self.closed:
            return
        continues_head = self._in_head and self._head_open
        try:
            self.parser.feed_data(data)
            # httptools holds an incomplete header line itself: count the reads that
            # continue an unfinished head (a head that began inside this read counts from
            # the next one, so a body followed by the start of a request never looks big).
            if self._in_head:
                if continues_head:
                    self._head_read_bytes += len(data)
                self._head_open = True
                if self._head_read_bytes > MAX_HEADER:
                    raise _Reject(431, "request header too large")
        except _Reject as exc:
            self._broken(exc)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            self._broken(cause if isinstance(cause, _Reject) else _Reject(400, "malformed request"))
        except httptools.HttpParserUpgrade:
            self._broken(_Reject(400, "protocol upgrade is not supported"))
        except httptools.HttpParserError as exc:
            self._broken(_Reject(400, f"malformed request: {exc}"))
        if (self._in_head or self._in_body) and not self.broken:
            self._watch_unfinished()
        self._dispatch()
        if self.busy and not self.paused and (
                self.pending_bytes + len(self._body) > MAX_BUFFERED
                or len(self.pending) >= MAX_PIPELINED):
            self.paused = True
            self.transport.pause_reading()  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        cb, self.on_lost = self.on_lost, None
        if cb is not None:
            cb()

    # --- httptools callbacks -----------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._in_head, self._head_open, self._head_read_bytes, self._head_bytes = True, False, 0, 0
        self._url, self._headers, self._body = b"", {}, bytearray()
        self._arrival = self.clock_ns()

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > MAX_HEADER:
            raise _Reject(431, "request header too large")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value)
        if self._head_bytes > MAX_HEADER:
            raise _Reject(431, "request header too large")
        self._headers[name.decode("latin-1").strip().lower()] = value.decode("latin-1").strip()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._in_body, self._body_start = True, 0
        length = self._headers.get("content-length")
        if length is not None and int(length) > MAX_BODY:  # llhttp has checked it is a number
            raise _Reject(413, "request body too large")
        if (self._headers.get("expect", "").lower() == "100-continue"
                and not self.busy and not self.pending):
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # type: ignore[union-attr]

    def on_body(self, body: bytes) -> None:
        self._body += body
        if len(self._body) > MAX_BODY:
            raise _Reject(413, "request body too large")

    def on_message_complete(self) -> None:
        p = self.parser
        path, _, query = self._url.decode("latin-1").partition("?")
        req = Request(p.get_method().decode("latin-1"), path, self._headers,
                      bytes(self._body), self._arrival)
        req.extra["keep_alive"] = p.should_keep_alive()
        if query:  # vLLM's sleep-mode endpoints take their level (and models.py its model) here
            req.extra["query"] = query
        self._in_body = False
        self.pending.append(req)
        self.pending_bytes += len(req.body)
        self._body = bytearray()

    # --- deadlines ----------------------------------------------------------------------
    def _arm(self, delay_s: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = self.clock_ns() + int(delay_s * 1e9)
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._tick)

    def _deadline(self) -> tuple[int, str] | None:
        """(perf ns, what) the connection's current wait ends at; None while this server is
        the one that keeps it waiting (a response under way, reading paused)."""
        if self.paused:
            return None
        if self._in_head:
            return self._arrival + int(self.head_timeout_s * 1e9), "head"
        if self._in_body:
            if not self._body_start:
                self._body_start = self.clock_ns()
            return self._body_start + int(self.body_timeout_s * 1e9), "body"
        if self.busy or self.pending:
            return None
        return self._idle_since + int(self.idle_timeout_s * 1e9), "idle"

    def _watch_unfinished(self) -> None:
        """A read left a head or a body unfinished: make sure the timer fires by its end."""
        wait = self._deadline()
        if wait is not None and (self._timer is None or self._timer_at > wait[0]):
            self._arm(max(0.0, (wait[0] - self.clock_ns()) / 1e9))

    def _tick(self) -> None:
        self._timer = None
        if self.broken or self.closed:
            return
        wait = self._deadline()
        now = self.clock_ns()
        if wait is None:
            self._arm(self.idle_timeout_s)
        elif now < wait[0]:
            self._arm((wait[0] - now) / 1e9)
        elif wait[1] == "idle":  # nothing under way, nothing owed: just close
            self.closed = True
            self.transport.close()  # type: ignore[union-attr]
        else:
            within = (f"request head not complete within {self.head_timeout_s:g} s"
                      if wait[1] == "head" else
                      f"request body not complete within {self.body_timeout_s:g} s of its head")
            self._broken(_Reject(408, within))
            self._dispatch()

    # --- dispatch --------------------------------------------------------------------------
    def _broken(self, reject: _Reject) -> None:
        """The byte stream cannot be parsed past this point: answer the requests already
        parsed, then the error, then close."""
        self.broken = True
        self.pending.append(reject)

    def _dispatch(self) -> None:
        if self._dispatching:
            return
        self._dispatching = True
        try:
            while not self.busy and not self.closed and self.pending:
                item = self.pending.popleft()
                if isinstance(item, _Reject):
                    self._fail(item.status, item.message)
                    continue
                self.pending_bytes -= len(item.body)
                self.keep_alive = item.extra.pop("keep_alive")
                self.busy = True
                self.request_id = echo_value(item.headers.get("x-request-id"))
                self.handler(self, item)
            if self.paused and not self.busy and not self.closed:
                self.paused = False
                self.transport.resume_reading()  # type: ignore[union-attr]
                if self._in_body:  # the body waited on us, not the client: its time restarts
                    self._body_start = 0
        finally:
            self._dispatching = False

    def _fail(self, status: int, message: str) -> None:
        self.keep_alive = False
        self.busy = True
        err = {"message": message, "type": "BadRequestError", "param": None, "code": status}
        body = json.dumps({"error": err}).encode()
        self.respond(status, body)

    # --- responding ------------------------------------------------------------------------
    def _head(self, status: int, content_type: bytes, extra: list[tuple[str, str]] | None) -> bytearray:
        out = bytearray(b"HTTP/1.1 %d %s\r\n" % (status, _reason(status).encode()))
        out += self.emulated_header
        out += b"content-type: " + content_type + b"\r\n"
        if self.request_id is not None:
            out += b"x-request-id: " + self.request_id.encode("latin-1", "replace") + b"\r\n"
        for k, v in extra or ():
            out += f"{k}: {_strip_controls(str(v))}\r\n".encode("latin-1", "replace")
        if not self.keep_alive:
            out += b"connection: close\r\n"
        return out

    def respond(self, status: int, body: bytes, content_type: bytes = b"application/json",
                extra: list[tuple[str, str]] | None = None) -> None:
        if self.closed or self.transport is None:
            return
        out = self._head(status, content_type, extra)
        out += b"content-length: %d\r\n\r\n" % len(body)
        out += body
        self.transport.write(bytes(out))
        self._done()

    def start_stream(self, status: int = 200, content_type: bytes = b"text/event-stream",
                     first: bytes = b"") -> None:
        """Headers (and optionally a first chunk) in one write."""
        if self.closed or self.transport is None:
            return
        out = self._head(status, content_type, None)
        out += b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        if first:
            out += b"%x\r\n%b\r\n" % (len(first), first)
        self.transport.write(bytes(out))

    def write_chunk(self, data: bytes, stamp: int = -1) -> None:
        """One chunk; `self.gt[stamp]` gets the perf ns of the actual socket write."""
        if self.closed:
            return
        framed = b"%x\r\n%b\r\n" % (len(data), data)
        if BATCH.active:
            if not self.out:
                BATCH.dirty.append(self)
            self.out.append(framed)
            if stamp >= 0:
                self.stamps.append(stamp)
        else:
            self.transport.write(framed)  # type: ignore[union-attr]
            if stamp >= 0:
                self.gt[stamp] = time.perf_counter_ns()

    def flush(self, tail: bytes = b"") -> None:
        """Write what the current batch holds for this connection (plus `tail`) at once."""
        data = b"".join(self.out) + tail if self.out else tail
        self.out.clear()
        if data and not self.closed:
            self.transport.write(data)  # type: ignore[union-attr]
        if self.stamps:
            now = time.perf_counter_ns()
            gt = self.gt
            for i in self.stamps:
                gt[i] = now
            self.stamps.clear()

    def end_stream(self, last: bytes = b"", stamp: int = -1) -> None:
        if self.closed:
            return
        if stamp >= 0:
            self.stamps.append(stamp)
        self.flush((b"%x\r\n%b\r\n" % (len(last), last) if last else b"") + b"0\r\n\r\n")
        self._done()

    def abort(self) -> None:
        """Close the TCP connection abruptly (RST), no terminating chunk."""
        self.on_lost = None
        if self.transport is not None and not self.closed:
            self.flush()
            self.transport.abort()
        self.closed = True

    def close_after(self, data: bytes) -> None:
        """Write `data` as a chunk, then close without the terminating chunk."""
        self.on_lost = None
        if self.transport is not None and not self.closed:
            self.flush(b"%x\r\n%b\r\n" % (len(data), data))
            self.transport.close()
        self.closed = True

    def _done(self) -> None:
        self.on_lost = None
        self.busy = False
        self.request_id = None
        self._idle_since = self.clock_ns()
        if not self.keep_alive:
            self.transport.close()  # type: ignore[union-attr]
            self.closed = True
        else:
            self._dispatch()


def _strip_controls(value: str) -> str:
    """A header value without CR, LF or other control characters."""
    return re.sub(r"[\x00-\x1f\x7f]", "", value)
