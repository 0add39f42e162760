"""The client's timing at the socket, against a server thread in the same process (one
clock, nothing to map): `sent_at` is taken before the request's first byte could be read,
a chunk is stamped in the callback that received its bytes (not when a coroutine got round
to it), connections are kept alive and dropped when they cannot be reused, and https works
(the certificate checked)."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
import ssl
import threading
import time

import pytest
from servingbench.resources.loadgen import connections as client

# the order of writes and stamps is set by short sleeps: make test's serial pass
pytestmark = pytest.mark.serial

_perf = time.perf_counter_ns
MS = 1_000_000
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
TERMINATOR = b"0\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def event(n: int) -> bytes:
    return chunk(b'data: {"choices":[{"text":"t"}],"usage":{"prompt_tokens":3,'
                 b'"completion_tokens":%d}}\n\n' % n)


DONE = chunk(b"data: [DONE]\n\n")


class ThreadServer:
    """Blocking sockets in threads. `answer(conn, n)` writes the n-th response and returns
    the perf_counter_ns of its writes; the server keeps each request's first-byte time."""

    def __init__(self, answer, tls: ssl.SSLContext | None = None) -> None:
        self.answer, self.tls = answer, tls
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.sock.getsockname()[1]}/v1/completions"
        self.accepted = 0
        self.log: list[tuple[int, bytes, list[int]]] = []  # (first byte at, head, writes)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            buf = b""
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    if not buf:
                        first = _perf()
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = int(next(ln.split(b":")[1] for ln in head.split(b"\r\n")
                                  if ln.lower().startswith(b"content-length:")))
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                writes = self.answer(conn, len(self.log))
                self.log.append((first, head, writes))
        except (OSError, ssl.SSLError):
            return
        finally:
            conn.close()

    def stop(self) -> None:
        self.sock.close()


@pytest.fixture
def serve():
    started: list[ThreadServer] = []

    def start(answer, tls=None) -> ThreadServer:
        s = ThreadServer(answer, tls)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def two_tokens(conn: socket.socket, n: int) -> list[int]:
    w1 = _perf()
    conn.sendall(HEAD + event(1))
    time.sleep(0.02)
    w2 = _perf()
    conn.sendall(event(2) + DONE + TERMINATOR)
    return [w1, w2]


def new_request(rid: str = "r") -> client.Request:
    return client.Request(rid, "steady", "c=1", "concurrency", 1.0, _perf())


async def send(pool: client.Connections, url: str, rid: str = "r", headers=None,
               first_token_s: float = 5, total_s: float = 10) -> client.Request:
    req = new_request(rid)
    await client.send(pool, url, b'{"prompt":"x"}', headers or {"X-Request-ID": rid}, req,
                      first_token_s, total_s)
    return req


def test_sent_at_precedes_the_request_and_chunks_follow_the_writes(serve):
    srv = serve(two_tokens)

    async def go() -> list[tuple[int, client.Request]]:
        out = []
        async with client.Connections(srv.url, 5) as pool:
            for k in range(3):
                before = _perf()
                out.append((before, await send(pool, srv.url, f"r{k}")))
        return out

    done = asyncio.run(go())
    assert srv.accepted == 1  # one keep-alive connection carried all three
    assert len(srv.log) == 3
    for (before, req), (first_byte, head, writes) in zip(done, srv.log, strict=True):
        assert req.status == "ok" and req.http_status == 200, req.error
        assert req.chunk_tokens == [1, 1] and req.usage_total == 2 and req.input_tokens == 3
        # taken when the bytes went to the transport: before the server could read them
        assert before <= req.sent <= first_byte
        assert all(w <= at for w, at in zip(writes, req.chunk_at, strict=True))
        assert req.finished == req.chunk_at[-1]  # the read that brought [DONE]
        assert head.startswith(b"POST /v1/completions HTTP/1.1\r\n")
        assert f"x-request-id: {req.request_id}".encode() in head.lower()
        assert b"accept-encoding: identity" in head.lower()


def test_a_chunk_is_stamped_when_its_bytes_arrive_not_when_a_coroutine_resumes(serve):
    """A slow neighbour runs in the same loop iteration as the chunk's read, after it: a
    stamp taken in `data_received` precedes it, one taken by a coroutine woken from there
    would follow it. The default asyncio loop runs a round's I/O callbacks before its due
    timers, which puts the neighbour exactly there."""
    head_sent, go_write, wrote = threading.Event(), threading.Event(), threading.Event()

    def on_cue(conn: socket.socket, n: int) -> list[int]:
        conn.sendall(HEAD)
        head_sent.set()
        go_write.wait(5)
        w = _perf()
        conn.sendall(event(1) + DONE + TERMINATOR)
        wrote.set()
        return [w]

    srv = serve(on_cue)
    neighbour: list[int] = []

    def slow_neighbour() -> None:
        neighbour.append(_perf())
        time.sleep(0.05)

    async def go() -> client.Request:
        loop = asyncio.get_running_loop()
        async with client.Connections(srv.url, 5) as pool:
            task = loop.create_task(send(pool, srv.url))
            while not head_sent.is_set():
                await asyncio.sleep(0.001)
            await asyncio.sleep(0.05)  # the head is read: what comes next is the chunk
            loop.call_later(0.001, slow_neighbour)
            go_write.set()
            # the loop is held until the chunk is in the socket and the timer due: both are
            # ready for the same next round
            wrote.wait(5)
            time.sleep(0.005)
            return await task

    req = asyncio.run(go())
    assert req.status == "ok", req.error
    assert len(neighbour) == 1
    assert req.chunk_at[0] < neighbour[0]


def test_done_before_the_end_of_the_response_keeps_the_connection(serve):
    def late_end(conn: socket.socket, n: int) -> list[int]:
        conn.sendall(HEAD + event(1) + DONE)
        time.sleep(0.05)
        conn.sendall(TERMINATOR)
        return []

    srv = serve(late_end)

    async def go() -> list[client.Request]:
        async with client.Connections(srv.url, 5) as pool:
            first = await send(pool, srv.url, "a")
            await asyncio.sleep(0.2)  # the terminator arrives: the connection goes back
            return [first, await send(pool, srv.url, "b")]

    reqs = asyncio.run(go())
    assert [r.status for r in reqs] == ["ok", "ok"]
    assert srv.accepted == 1


def test_a_connection_the_server_closed_is_not_reused(serve):
    def then_close(conn: socket.socket, n: int) -> list[int]:
        conn.sendall(HEAD + event(1) + DONE + TERMINATOR)
        conn.shutdown(socket.SHUT_RDWR)
        return []

    srv = serve(then_close)

    async def go() -> list[client.Request]:
        async with client.Connections(srv.url, 5) as pool:
            first = await send(pool, srv.url, "a")
            await asyncio.sleep(0.2)  # the close reaches the idle connection
            return [first, await send(pool, srv.url, "b")]

    reqs = asyncio.run(go())
    assert [r.status for r in reqs] == ["ok", "ok"], [r.error for r in reqs]
    assert srv.accepted == 2


def test_junk_after_the_response_drops_the_connection_but_not_the_answer(serve):
    def junk(conn: socket.socket, n: int) -> list[int]:
        conn.sendall(HEAD + event(1) + DONE + TERMINATOR + b"HTTP/1.1 200 OK\r\n")
        return []

    srv = serve(junk)

    async def go() -> list[client.Request]:
        async with client.Connections(srv.url, 5) as pool:
            first = await send(pool, srv.url, "a")
            await asyncio.sleep(0.1)
            return [first, await send(pool, srv.url, "b")]

    reqs = asyncio.run(go())
    assert [r.status for r in reqs] == ["ok", "ok"]
    assert srv.accepted == 2


def test_a_header_that_would_break_the_framing_is_refused_unsent(serve):
    srv = serve(two_tokens)

    async def go() -> client.Request:
        async with client.Connections(srv.url, 5) as pool:
            return await send(pool, srv.url, headers={"X-A": "b\r\nX-Injected: 1"})

    req = asyncio.run(go())
    assert req.status == "protocol_error" and "X-A" in req.error
    assert req.sent is not None and req.finished is not None
    time.sleep(0.1)
    assert srv.log == []


def test_connection_refused_and_connect_timeout():
    refused = socket.create_server(("127.0.0.1", 0))
    port = refused.getsockname()[1]
    refused.close()  # nothing listens there now
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)  # never accepts: once its queue is full, a handshake waits forever
    fillers = []
    for _ in range(4):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(full.getsockname())
        fillers.append(s)
    time.sleep(0.1)

    async def go(url: str) -> client.Request:
        async with client.Connections(url, 0.3) as pool:
            return await send(pool, url, first_token_s=5)

    try:
        req = asyncio.run(go(f"http://127.0.0.1:{port}/v1/completions"))
        assert req.status == "disconnect" and req.error.startswith("connect failed"), req.error
        url = f"http://127.0.0.1:{full.getsockname()[1]}/v1/completions"
        req = asyncio.run(go(url))
        assert req.status == "timeout" and req.error.startswith("connect timeout"), req.error
    finally:
        for s in [*fillers, full]:
            s.close()


def self_signed(tmp_path) -> tuple[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


def test_https_streams_and_checks_the_certificate(serve, tmp_path):
    cert, key = self_signed(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    srv = serve(two_tokens, tls)

    async def go(ctx: ssl.SSLContext | None) -> list[client.Request]:
        async with client.Connections(srv.url, 5, ssl_context=ctx) as pool:
            return [await send(pool, srv.url, f"r{k}") for k in range(2)]

    trusted = asyncio.run(go(ssl.create_default_context(cafile=cert)))
    assert [r.status for r in trusted] == ["ok", "ok"], [r.error for r in trusted]
    assert all(r.chunk_tokens == [1, 1] for r in trusted)
    first_byte = [t for t, _, _ in srv.log]
    assert all(r.sent <= t for r, t in zip(trusted, first_byte, strict=True))
    assert srv.accepted == 1  # kept alive over TLS too
    untrusted = asyncio.run(go(None))  # the system's CAs: a self-signed certificate fails
    assert {r.status for r in untrusted} == {"disconnect"}
    assert all("connect failed" in r.error and "CERTIFICATE_VERIFY_FAILED" in r.error for r in untrusted)
