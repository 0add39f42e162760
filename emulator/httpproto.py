"""A lean HTTP/1.1 server protocol for the hot path: keep-alive, Content-Length
request bodies, chunked streaming responses. One request at a time per connection
(pipelined requests wait in the buffer). Every response carries the emulated header.
"""

from __future__ import annotations

import asyncio
import json
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus

EMULATED_HEADER = b"x-servingbench-emulated: 1\r\n"
MAX_HEADER = 64 * 1024
MAX_BODY = 64 * 1024 * 1024


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


class HttpConnection(asyncio.Protocol):
    """Parses requests and hands them to `handler(conn, request)`; the handler answers
    with `respond` or `start_stream` … `write_chunk` … `end_stream` (or `abort`)."""

    def __init__(self, handler: Callable[[HttpConnection, Request], None], clock_ns: Callable[[], int]):
        self.handler = handler
        self.clock_ns = clock_ns
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.busy = False
        self.keep_alive = True
        self.closed = False
        self.on_lost: Callable[[], None] | None = None  # set while a response is in progress
        self.request_id: str | None = None
        self._parsing = False
        self._continued = False
        self.out: list[bytes] = []  # chunks held by the current write batch
        self.stamps: list[int] = []  # indexes into self.gt waiting for their write time
        self.gt = array("q")  # the current stream's ground truth: (scheduled, written, tokens)*

    # --- asyncio.Protocol ----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._parse()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        cb, self.on_lost = self.on_lost, None
        if cb is not None:
            cb()

    # --- parsing ---------------------------------------------------------------------------
    def _parse(self) -> None:
        if self._parsing:
            return
        self._parsing = True
        try:
            self._parse_loop()
        finally:
            self._parsing = False

    def _parse_loop(self) -> None:
        while not self.busy and not self.closed:
            end = self.buf.find(b"\r\n\r\n")
            if end > MAX_HEADER or (end < 0 and len(self.buf) > MAX_HEADER):
                self._fail(431, "request header too large")
                return
            if end < 0:
                return
            head = bytes(self.buf[:end]).decode("latin-1")
            lines = head.split("\r\n")
            parts = lines[0].split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                self._fail(400, "malformed request line")
                return
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if not sep:
                    self._fail(400, "malformed header line")
                    return
                headers[name.strip().lower()] = value.strip()
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._fail(501, "chunked request bodies are not supported; send Content-Length")
                return
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                self._fail(400, "bad Content-Length")
                return
            if length < 0 or length > MAX_BODY:
                self._fail(413, "request body too large")
                return
            if len(self.buf) < end + 4 + length:
                if headers.get("expect", "").lower() == "100-continue" and not self._continued:
                    self._continued = True
                    self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # type: ignore[union-attr]
                return
            self._continued = False
            body = bytes(self.buf[end + 4:end + 4 + length])
            del self.buf[:end + 4 + length]
            conn_hdr = headers.get("connection", "").lower()
            self.keep_alive = conn_hdr != "close" and (parts[2] == "HTTP/1.1" or conn_hdr == "keep-alive")
            self.busy = True
            self.request_id = headers.get("x-request-id")
            path = parts[1].split("?", 1)[0]
            self.handler(self, Request(parts[0], path, headers, body, self.clock_ns()))

    def _fail(self, status: int, message: str) -> None:
        self.keep_alive = False
        self.busy = True
        err = {"message": message, "type": "BadRequestError", "param": None, "code": status}
        body = json.dumps({"error": err}).encode()
        self.respond(status, body)

    # --- responding ------------------------------------------------------------------------
    def _head(self, status: int, content_type: bytes, extra: list[tuple[str, str]] | None) -> bytearray:
        out = bytearray(b"HTTP/1.1 %d %s\r\n" % (status, _reason(status).encode()))
        out += EMULATED_HEADER
        out += b"content-type: " + content_type + b"\r\n"
        if self.request_id is not None:
            out += b"x-request-id: " + self.request_id.encode("latin-1", "replace") + b"\r\n"
        for k, v in extra or ():
            out += f"{k}: {v}\r\n".encode("latin-1", "replace")
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
        if not self.keep_alive:
            self.transport.close()  # type: ignore[union-attr]
            self.closed = True
        elif self.buf:
            self._parse()
