"""A fixed-timing streaming server that keeps its deadlines at the accuracy bench's rates.

The load generator's accuracy is measured against a server's own write times, so the server
must write each token when it is due: an error the client did not make cannot be told from
one it did. The emulator's `--fixed-timing` mode speaks the whole OpenAI/vLLM surface on
asyncio, and at c=256 × 128 tokens every 5 ms (≈51,000 chunk writes a second) it needs
≈18 µs of CPU a chunk, more than one core: its writes fell 40–140 ms behind, and no client
could see more than ≈0.83 of the ideal rate. This server does only what the bench needs,
on one thread with no event-loop framework: an epoll loop, one heap of deadlines, chunk
bytes formatted with `%` and handed to `socket.send` (≈4 µs of that a chunk is the
kernel's loopback send, measured with a bare socket loop on this machine).

What it speaks (the emulator's bytes for a streamed token, so every client parses the
same stream it would from the emulator): `POST /v1/completions` and
`/v1/chat/completions` (request checks and prompt counts from the emulator's own
`servingbench.emulator.api`), HTTP/1.1 keep-alive, chunked SSE, `stream_options` include_usage and
continuous_usage_stats, `X-Request-ID` echoed, the `x-servingbench-emulated: 1` header (it
is not a model); `POST /tokenize`, `GET /v1/models`, `GET /health`; anything else is 404
(no `/metrics`). Every request gets exactly `max_tokens` tokens (16 when absent), as if
`ignore_eos` were set. Token i (1-based) of a request is due at arrival + TTFT + (i−1) ×
ITL, arrival being when its body was read; with `--tokens-per-chunk K` the tokens go out K
to a chunk, each chunk when its last token is due. Ground truth: the emulator's format
(emulator/groundtruth.py), one JSON line per finished request.

Timing: the loop sleeps in `epoll` until about a millisecond before the next deadline
(epoll's timeout is whole milliseconds), then polls without blocking until it is due; the
server is meant to have a core of its own (the bench pins it to CPU 1).

    python benchmarks/fixed_server.py --ttft-ms 20 --itl-ms 5 [--tokens-per-chunk 4]
        --ground-truth truth.jsonl --port 0 --port-file port.txt
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import os
import select
import signal
import socket
import sys
import time
import uuid
from array import array
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from servingbench.emulator import api, tokenizer  # noqa: E402
from servingbench.emulator.groundtruth import Clock  # noqa: E402

_perf = time.perf_counter_ns
IN, OUT = select.EPOLLIN, select.EPOLLOUT
WORDS = [w.encode() for w in tokenizer.WORD_JSON]
DONE = b"data: [DONE]\n\n"
MAX_HEAD = 1 << 16
MAX_MODEL_LEN = 1 << 20
WAKE_EARLY_NS = 1_500_000  # epoll wakes on whole ms: sleep to here before a deadline, then poll
# A ground-truth line (128 chunks to JSON) costs ~0.1 ms: written only when nothing is due
# for this long, or nothing is streaming. Written at a stream's end, 256 streams ending
# together delayed the next round's requests by 25 ms.
RECORD_ROOM_NS = 300_000


# The emulator's token count (`\w+|[^\w\s]`, emulator/tokenizer.py) without its regex on
# ASCII text: punctuation spaced out, then split. 5× cheaper on a 512-token prompt, which
# matters when 256 requests arrive together and each delays the writes due behind it.
_SPACED = {c: f" {chr(c)} " for c in range(128)
           if not (chr(c).isalnum() or chr(c) == "_" or chr(c).isspace())}


def count_tokens(text: str) -> int:
    return len(text.translate(_SPACED).split()) if text.isascii() else tokenizer.count(text)


class Conn:
    __slots__ = ("sock", "fd", "buf", "out", "stamps", "stream", "close_after", "read_at")

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.fd = sock, sock.fileno()
        self.buf = b""
        self.out: list[bytes] = []  # bytes the kernel did not take yet
        self.stamps: list[tuple[array, int]] = []  # written-time slots waiting on `out`
        self.stream: Stream | None = None
        self.close_after = False
        self.read_at = 0  # when the last bytes were read: a request's arrival


class Stream:
    __slots__ = ("conn", "rid", "cid", "arrival", "target", "k", "sent", "word", "pre", "usage_pre",
                 "plain", "final_mid", "include_usage", "head", "prompt", "gt", "streaming", "chat",
                 "created", "alive")


class Server:
    def __init__(self, ttft_ms: float, itl_ms: float, k: int, model: str, truth: Path | None) -> None:
        self.ttft, self.itl, self.k, self.model = int(ttft_ms * 1e6), int(itl_ms * 1e6), k, model
        self.heap: list = []
        self.seq = itertools.count()
        self.conns: dict[int, Conn] = {}
        self.clock = Clock()
        self.finished: deque[tuple[Stream, int]] = deque()  # ground truth not yet written
        self.truth = truth.open("a", encoding="utf-8") if truth else None
        self.ep = select.epoll()
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    # --- the loop ----------------------------------------------------------------------------
    def serve(self, port: int, port_file: Path | None) -> None:
        self.lsock.bind(("127.0.0.1", port))
        self.lsock.listen(4096)
        self.lsock.setblocking(False)
        self.ep.register(self.lsock.fileno(), IN)
        if port_file is not None:
            tmp = port_file.with_suffix(".tmp")
            tmp.write_text(str(self.lsock.getsockname()[1]))
            os.replace(tmp, port_file)
        lfd, heap, poll, conns = self.lsock.fileno(), self.heap, self.ep.poll, self.conns
        finished, ready = self.finished, deque()
        # One small piece of work per turn, in this order: the writes now due; every socket
        # with news (a read stamps a request's arrival); one request parsed; one ground-truth
        # line written when nothing is due for a while. So 256 requests arriving together
        # delay neither the tokens already due nor each other's arrival stamps by more than
        # one request's parse (~25 µs).
        while True:
            if heap:
                wait = heap[0][0] - _perf()
                if wait <= 0:
                    self.emit_due()
                    wait = heap[0][0] - _perf() if heap else 1 << 62
            else:
                wait = 1 << 62
            if ready or (finished and wait > RECORD_ROOM_NS) or wait <= WAKE_EARLY_NS:
                timeout = 0.0
            elif wait == 1 << 62:
                timeout = 0.2
            else:
                timeout = (wait - WAKE_EARLY_NS) // 1_000_000 / 1000
            for fd, ev in poll(timeout):
                if fd == lfd:
                    self.accept()
                    continue
                conn = conns.get(fd)
                if conn is None:
                    continue
                if ev & OUT:
                    self.drain(conn)
                if ev & (IN | select.EPOLLHUP | select.EPOLLERR) and self.read(conn):
                    ready.append(conn)
            if ready:
                self.parse(ready.popleft())
            elif finished and (not heap or heap[0][0] - _perf() > RECORD_ROOM_NS):
                self.record(*finished.popleft())

    def accept(self) -> None:
        while True:
            try:
                sock, _ = self.lsock.accept()
            except BlockingIOError:
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Conn(sock)
            self.conns[conn.fd] = conn
            self.ep.register(conn.fd, IN)

    # --- writing -----------------------------------------------------------------------------
    def send(self, conn: Conn, data: bytes, gt: array | None = None, slot: int = -1) -> None:
        """Hand `data` to the kernel now; `gt[slot]` gets the time it was all handed over."""
        if not conn.out:
            try:
                n = conn.sock.send(data)
            except BlockingIOError:
                n = 0
            except OSError:
                self.drop(conn)
                return
            if n == len(data):
                if gt is not None:
                    gt[slot] = _perf()
                return
            data = data[n:]
            self.ep.modify(conn.fd, IN | OUT)
        conn.out.append(data)
        if gt is not None:
            conn.stamps.append((gt, slot))

    def drain(self, conn: Conn) -> None:
        data = b"".join(conn.out)
        try:
            n = conn.sock.send(data)
        except BlockingIOError:
            return
        except OSError:
            self.drop(conn)
            return
        if n < len(data):
            conn.out[:] = [data[n:]]
            return
        now = _perf()
        for gt, slot in conn.stamps:
            gt[slot] = now
        conn.out.clear()
        conn.stamps.clear()
        self.ep.modify(conn.fd, IN)
        if conn.close_after:
            self.drop(conn)

    def respond(self, conn: Conn, status: int, body: bytes, rid: str | None) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "Error")
        self.send(conn, b"HTTP/1.1 %d %s\r\nx-servingbench-emulated: 1\r\ncontent-type: application/json\r\n"
                  b"%bcontent-length: %d\r\n\r\n%b" % (status, reason.encode(), self._rid(rid), len(body), body))

    @staticmethod
    def _rid(rid: str | None) -> bytes:
        return b"x-request-id: %b\r\n" % rid.encode("latin-1", "replace") if rid else b""

    def drop(self, conn: Conn) -> None:
        if self.conns.pop(conn.fd, None) is None:
            return
        try:
            self.ep.unregister(conn.fd)
        except OSError:
            pass
        conn.sock.close()
        s = conn.stream
        if s is not None and s.alive:
            s.alive = False
            self.finished.append((s, 499))  # nginx's "client closed request"

    # --- reading -----------------------------------------------------------------------------
    def read(self, conn: Conn) -> bool:
        """True: new bytes to parse."""
        try:
            data = conn.sock.recv(1 << 16)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self.drop(conn)
            return False
        conn.read_at = _perf()
        conn.buf += data
        return True

    def parse(self, conn: Conn) -> None:
        while conn.stream is None and conn.fd in self.conns:
            buf = conn.buf
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    self.drop(conn)
                return
            lines = buf[:end].decode("latin-1").split("\r\n")
            try:
                method, path, _ = lines[0].split(" ", 2)
            except ValueError:
                self.drop(conn)
                return
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            size = int(headers.get("content-length") or 0)
            if len(buf) < end + 4 + size:
                return
            body, conn.buf = buf[end + 4:end + 4 + size], buf[end + 4 + size:]
            conn.close_after = headers.get("connection", "").lower() == "close"
            self.route(conn, method, path.split("?", 1)[0], headers.get("x-request-id"), body)

    def route(self, conn: Conn, method: str, path: str, rid: str | None, body: bytes) -> None:
        try:
            if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
                self.start(conn, self.generation(body, path.endswith("chat/completions")), rid, conn.read_at)
                return
            if method == "POST" and path == "/tokenize":
                ids = api.parse_tokenize(body, self.model)
                out = {"tokens": ids, "count": len(ids), "max_model_len": MAX_MODEL_LEN}
            elif method == "GET" and path == "/v1/models":
                out = {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "servingbench",
                                                   "max_model_len": MAX_MODEL_LEN}]}
            elif method == "GET" and path == "/health":
                out = {}
            else:
                raise api.ApiError(404, f"{method} {path}: not served by the bench's fixed-timing server")
            self.respond(conn, 200, json.dumps(out).encode(), rid)
        except api.ApiError as exc:
            self.respond(conn, exc.status, exc.body(), rid)

    def generation(self, raw: bytes, chat: bool) -> api.GenRequest:
        """The emulator's request checks (emulator.api), with a text prompt counted here."""
        body = api.parse_json(raw)
        prompt = body.get("prompt")
        if chat or not isinstance(prompt, str):
            return api.parse_generation(raw, chat, self.model, MAX_MODEL_LEN)
        api.check_model(body, self.model)
        stream, opts = body.get("stream", False), body.get("stream_options") or {}
        if not isinstance(stream, bool) or not isinstance(opts, dict):
            raise api.ApiError(400, "stream must be a boolean and stream_options an object")
        max_tokens = body.get("max_tokens") or 16
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise api.ApiError(400, "max_tokens must be a positive integer", "max_tokens")
        return api.GenRequest(False, stream, bool(opts.get("include_usage")), bool(opts.get("continuous_usage_stats")),
                              count_tokens(prompt), max_tokens, 0, True)

    # --- streams -----------------------------------------------------------------------------
    def start(self, conn: Conn, g: api.GenRequest, rid: str | None, arrival: int) -> None:
        s = Stream()
        s.conn, s.rid, s.arrival, s.alive = conn, rid, arrival, True
        s.cid = ("chatcmpl-" if g.chat else "cmpl-") + uuid.uuid4().hex
        s.target, s.sent, s.k, s.word = g.max_tokens or 16, 0, self.k, 0
        s.prompt, s.include_usage, s.streaming, s.chat = g.prompt_tokens, g.include_usage, g.stream, g.chat
        s.created = int(time.time())
        s.gt = array("q")
        if g.chat:
            s.head = (b'data: {"id":"%b","object":"chat.completion.chunk","created":%d,"model":"%b","choices":['
                      % (s.cid.encode(), s.created, self.model.encode()))
            s.pre = s.head + b'{"index":0,"delta":{"content":"'
            mid, post = b'"},"logprobs":null,"finish_reason":', b"}]"
        else:
            s.head = (b'data: {"id":"%b","object":"text_completion","created":%d,"model":"%b","choices":['
                      % (s.cid.encode(), s.created, self.model.encode()))
            s.pre = s.head + b'{"index":0,"text":"'
            mid, post = b'","logprobs":null,"finish_reason":', b',"stop_reason":null}]'
        details = b'"prompt_tokens_details":{"cached_tokens":0},'
        s.usage_pre = (mid + b"null" + post + b',"usage":{"prompt_tokens":%d,%b"total_tokens":'
                       % (s.prompt, details)) if g.continuous_usage else None
        s.plain = mid + b"null" + post + b"}\n\n"
        s.final_mid = mid + b'"length"' + post
        conn.stream = s
        if g.stream:
            first = b""
            if g.chat:  # vLLM's role chunk before any token
                usage = b',"usage":{"prompt_tokens":%d,%b"total_tokens":%d,"completion_tokens":0}' % (
                    s.prompt, details, s.prompt) if g.continuous_usage else b""
                role = (s.head + b'{"index":0,"delta":{"role":"assistant","content":""},'
                        b'"logprobs":null,"finish_reason":null}]' + usage + b"}\n\n")
                first = b"%x\r\n%b\r\n" % (len(role), role)
            self.send(conn, b"HTTP/1.1 200 OK\r\nx-servingbench-emulated: 1\r\ncontent-type: text/event-stream\r\n"
                      b"%bcache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n%b" % (self._rid(rid), first))
        due = arrival + self.ttft + (min(s.k, s.target) - 1) * self.itl
        heapq.heappush(self.heap, (due, next(self.seq), s))

    def emit_due(self) -> None:
        heap, pop, push, seq, itl = self.heap, heapq.heappop, heapq.heappush, self.seq, self.itl
        now = _perf()
        while heap and heap[0][0] <= now:
            due, _, s = pop(heap)
            if not s.alive:
                continue
            n = min(s.k, s.target - s.sent)
            sent = s.sent = s.sent + n
            text = WORDS[s.word % len(WORDS)] if n == 1 else b"".join(
                WORDS[(s.word + i) % len(WORDS)] for i in range(n))
            s.word += n
            if not s.streaming:  # one body when the last token is due
                if sent < s.target:
                    push(heap, (due + min(s.k, s.target - sent) * itl, next(seq), s))
                else:
                    self.finish_full(s, due)
                continue
            gt = s.gt
            gt.extend((due, 0, n))
            if sent < s.target:
                if s.usage_pre is not None:
                    data = b"%b%b%b%d,\"completion_tokens\":%d}}\n\n" % (
                        s.pre, text, s.usage_pre, s.prompt + sent, sent)
                else:
                    data = s.pre + text + s.plain
                self.send(s.conn, b"%x\r\n%b\r\n" % (len(data), data), gt, len(gt) - 2)
                push(heap, (due + min(s.k, s.target - sent) * itl, next(seq), s))
                continue
            usage = b'"usage":{"prompt_tokens":%d,"prompt_tokens_details":{"cached_tokens":0},' \
                    b'"total_tokens":%d,"completion_tokens":%d}' % (s.prompt, s.prompt + sent, sent)
            data = s.pre + text + s.final_mid + (b"," + usage if s.usage_pre is not None else b"") + b"}\n\n"
            if s.include_usage:
                data += s.head + b"]," + usage + b"}\n\n"
            data += DONE
            self.send(s.conn, b"%x\r\n%b\r\n0\r\n\r\n" % (len(data), data), gt, len(gt) - 2)
            self.done(s, 200)

    def finish_full(self, s: Stream, due: int) -> None:
        words = tokenizer.WORDS
        text = "".join(" " + words[i % len(words)] for i in range(s.sent))
        body = api.full_response(s.chat, s.cid, s.created, self.model, text, "length", s.prompt, s.sent)
        self.respond(s.conn, 200, body, s.rid)
        s.gt.extend((due, _perf(), s.sent))
        self.done(s, 200)

    def done(self, s: Stream, status: int) -> None:
        s.alive = False
        conn = s.conn
        self.finished.append((s, status))
        conn.stream = None
        if conn.close_after:
            if conn.out:
                return  # drain() closes it once the kernel has everything
            self.drop(conn)
        elif conn.buf:
            self.parse(conn)

    def record(self, s: Stream, status: int) -> None:
        if self.truth is None:
            return
        w, g = self.clock.wall, s.gt
        chunks = [[w(g[i]), w(g[i + 1]) if g[i + 1] else None, g[i + 2]] for i in range(0, len(g), 3)]
        self.truth.write(json.dumps({
            "completion_id": s.cid, "request_id": s.rid, "arrival_ns": w(s.arrival),
            "headers_ns": w(s.arrival) if s.streaming else None, "prompt_tokens": s.prompt,
            "completion_tokens": s.sent, "status": status, "chunks": chunks}, separators=(",", ":")) + "\n")
        self.truth.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fixed_server.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--itl-ms", type=float, default=5.0)
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument("--served-model-name", default="fixed")
    ap.add_argument("--ground-truth", type=Path, default=None)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", type=Path, default=None)
    a = ap.parse_args(argv)
    if a.tokens_per_chunk < 1 or a.ttft_ms < 0 or a.itl_ms < 0:
        ap.error("--tokens-per-chunk must be ≥ 1 and --ttft-ms, --itl-ms ≥ 0")
    server = Server(a.ttft_ms, a.itl_ms, a.tokens_per_chunk, a.served_model_name, a.ground_truth)

    def stop(*_: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve(a.port, a.port_file)
    except KeyboardInterrupt:
        pass
    finally:
        while server.finished:
            server.record(*server.finished.popleft())
        if server.truth is not None:
            server.truth.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
