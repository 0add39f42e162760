"""The streaming hot path: OpenAI-compatible requests on an asyncio Protocol, timed at the socket.

`Connections` keeps keep-alive connections to one endpoint (http, or https through the event
loop's TLS), opened on demand within the connect timeout and reused last-in first-out. Each
connection is an `asyncio.Protocol`: its response is parsed by httptools (the C HTTP/1.1
parser behind uvicorn) and split into SSE events inside `data_received`, so a chunk's time is
`perf_counter_ns` taken when its bytes arrived - not when a coroutine woken by them got its
turn, one event-loop turn later, after every other stream that was ready. `sent_at` is taken
as the request's bytes are handed to the transport of an open connection: connection setup
counts as the client's own lateness (`sched_lag`), never as server TTFT.

The SSE split is sse.py; the request's observations are records.py.

Whatever the server sends, `send` ends within its timeouts (connect, first token, total)
with a status: a head, framing or stream it cannot parse, wrong JSON types and counts out
of range are `protocol_error`, and so is any unexpected exception, so a worker never dies
silently. Every error text is redacted. A connection is reused only after a whole, clean
answer that the server said may be kept alive; anything else closes it.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from urllib.parse import urlsplit

import httptools
from servingbench.resources.contract.redact import short_error
from servingbench.resources.loadgen.records import Request, fail
from servingbench.resources.loadgen.request_bytes import RequestBytes, error_message
from servingbench.resources.loadgen.sse import (
    DEFAULT_MAX_EVENTS,
    SNIP,
    Events,
    Malformed,
    max_events,
)

# the header a load balancer in front of several replicas names the serving one with
# (resources/model_server/fleet/balancer.py sets it; contract §2.2 `replica`)
REPLICA_HEADER = b"x-servingbench-replica"
MAX_HEAD_BYTES = 1 << 16  # a response's status line and headers; more is a protocol_error
ERROR_BODY_BYTES = 4096  # what a non-200 answer's error text is read from
DRAIN_S = 10.0  # after [DONE], the rest of the response must come within this to keep the connection
_now = time.perf_counter_ns


class ConnectTimeout(Exception):
    """No connection within the connect timeout."""


class _Exchange:
    """One request on one connection: the httptools parser's callbacks fill the request as
    the bytes arrive, inside the protocol's `data_received`; `waiter` is resolved when the
    request has its status. Once resolved it never touches the request again; it only
    decides whether the connection can carry the next one."""

    __slots__ = ("conn", "req", "waiter", "tm", "total_deadline", "secrets", "parser", "events",
                 "at", "head_bytes", "headers_done", "ctype", "framed", "error_body", "complete", "keep_alive",
                 "timed", "resolved", "by_stream", "drain_timer", "plain")

    def __init__(self, conn: _Conn, req: Request, waiter: asyncio.Future, tm: asyncio.Timeout,
                 total_deadline: float, secrets: tuple[str, ...],
                 max_events: int = DEFAULT_MAX_EVENTS) -> None:
        self.conn, self.req, self.waiter, self.tm = conn, req, waiter, tm
        self.total_deadline, self.secrets = total_deadline, secrets
        self.parser = httptools.HttpResponseParser(self)
        self.events = Events(req, max_events)
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
        # the common state, mid-stream: a 200 whose head is read, first token seen, not yet
        # done, complete or resolved; a read in it checks one flag, not six. Every way out
        # of it (the [DONE], the end of the message, a resolve) clears it.
        self.plain = False

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
        elif name == REPLICA_HEADER:
            self.req.replica = value.decode("latin-1")[:128]

    def on_headers_complete(self) -> None:
        self.headers_done = True
        req = self.req
        req.http_status = status = self.parser.get_status_code()
        ctype = self.ctype
        if status != 200:
            self.error_body = bytearray()
        elif ctype and ctype.split(b";")[0].strip().lower() != b"text/event-stream":
            raise Malformed(f"HTTP 200 with Content-Type {ctype[:SNIP].decode('latin-1')!r}, "
                            "not text/event-stream")

    def on_body(self, body: bytes) -> None:
        if self.plain:
            if self.events.feed(body, self.at):
                self.plain = False
            return
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
        self.plain = False
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
        if self.plain:
            return
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
        if self.timed:
            self.plain = True  # every check above passed: until a way out, only this one

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
        self.plain = False
        if not self.resolved:
            self.resolved = True
            self.conn.abort()

    def _http_error(self) -> None:
        req = self.req
        req.status = "http_error"
        req.error = short_error(f"HTTP {req.http_status}: {error_message(bytes(self.error_body))}",
                                self.secrets)

    def _resolve(self, at: int, reuse: bool) -> None:
        self.plain = False
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

    def __init__(self, pool: Connections) -> None:
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
            ex.parser = None  # the cycle with its parser (see _detach)

    def abort(self) -> None:
        self.closed = True
        self._detach()
        if self.transport is not None:
            self.transport.abort()

    def release(self) -> None:
        self._detach()
        if not self.closed and not self.transport.is_closing():
            self.pool.idle.append(self)

    def _detach(self) -> None:
        """The exchange is over on this connection: no byte reaches its parser again. The
        parser holds the exchange (its callbacks) and the exchange the parser, a cycle only
        the garbage collector would free, a dozen objects a request: at c=256 that kept the
        collector walking them every few milliseconds (a generation-1 pass of 1.5–3 ms about
        every 250 requests). Cut here, they go as soon as the request is recorded."""
        ex, self.ex = self.ex, None
        if ex is not None:
            ex.parser = None


class Connections:
    """Keep-alive connections to one endpoint (http or https), opened on demand and reused
    last-in first-out; use as `async with Connections(url, connect_timeout_s) as pool`."""

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
        self.requests = RequestBytes(self.origin, f"Host: {self.host_header}\r\n".encode("ascii"))
        self.ssl = (ssl_context or ssl.create_default_context()) if tls else None
        self.connect_timeout_s = connect_timeout_s
        self.idle: list[_Conn] = []
        self.conns: set[_Conn] = set()
        self._addrs: list[tuple] | None = None

    async def __aenter__(self) -> Connections:
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for conn in list(self.conns):
            conn.abort()
        self.idle.clear()

    def message(self, url: str, headers: dict[str, str], body: bytes) -> bytes:
        """The request's bytes (request_bytes.py)."""
        return self.requests.message(url, headers, body)

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


async def send(pool: Connections, url: str, body: bytes, headers: dict[str, str], req: Request,
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
            ex = conn.ex = _Exchange(conn, req, waiter, tm, total_deadline, secrets,
                                     max_events(body))
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
