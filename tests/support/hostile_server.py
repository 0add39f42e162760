"""A hostile OpenAI-compatible server: a raw asyncio process on 127.0.0.1 that misbehaves
at the byte level, one named way per request.

Measured requests (those with an `X-Request-ID`) misbehave as their `X-Hostile` header
says; the probe (no request id) gets a clean two-token answer unless `--probe MODE`;
`--control MODE` makes `/metrics` and `/tokenize` misbehave; `--sleep-mode MODE` makes vLLM's
sleep-mode and health endpoints (`/sleep`, `/wake_up`, `/is_sleeping`, `/health`) misbehave:
`silence` (the connection is held, no byte ever sent), `continue_loop` (`100 Continue` every
0.3 s, forever), else a clean 200. Each of those calls is appended to `--seen FILE` as
`- PATH`. Every error it sends echoes
the caller's Authorization header and a handful of secret-looking strings (`LEAK`), so a
test can scan what the client wrote. Each measured request id is appended to
`--seen FILE` with the misbehaviour it met (`X-Hostile: all` takes each in turn).

    python tests/support/hostile_server.py --port-file F --seen S [--probe M] [--control M]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import signal
import sys

# Secret-shaped strings a careless server echoes back; none may reach a file or a log.
LEAK_SECRETS = {
    "url password": "hunter2-url-password",
    "aws secret": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "hf token": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
    "eks token": "k8s-aws-v1.aHR0cHM6Ly9zdHMuYW1hem9uYXdzLmNvbS8_QWN0aW9u",
    "basic": "dXNlcjpodW50ZXIyLWJhc2lj",
}
LEAK = (f"http://admin:{LEAK_SECRETS['url password']}@10.0.0.1:8000/ "
        f"AWS_SECRET_ACCESS_KEY={LEAK_SECRETS['aws secret']} {LEAK_SECRETS['hf token']} "
        f"{LEAK_SECRETS['eks token']} Authorization: Basic {LEAK_SECRETS['basic']}")

GOOD_CHUNK = b'data: {"choices":[{"index":0,"text":" t"}],"usage":{"prompt_tokens":3,"completion_tokens":%d}}\n\n'
BOMB = gzip.compress(b"\0" * (64 << 20), 9)  # 64 MiB of zeros in about 64 KiB


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def head(status: int = 200, ctype: str = "text/event-stream", extra: str = "",
         length: int | None = None) -> bytes:
    frame = "Transfer-Encoding: chunked" if length is None else f"Content-Length: {length}"
    return (f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\n{frame}\r\n{extra}"
            "Connection: close\r\n\r\n").encode()


def sse(*payloads: bytes) -> bytes:
    return b"".join(chunked(b"data: " + p + b"\n\n") for p in payloads)


DONE = chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"


def bad_stream(payload: bytes, first: bool = False) -> bytes:
    if first:
        return head() + sse(payload) + chunked(GOOD_CHUNK % 1) + DONE
    return head() + chunked(GOOD_CHUNK % 1) + sse(payload) + DONE


SLEEP_PATHS = ("/sleep", "/wake_up", "/is_sleeping", "/health")


class Hostile:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.seen = open(a.seen, "a", buffering=1) if a.seen else None  # noqa: SIM115
        self.n = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            raw = await reader.readuntil(b"\r\n\r\n")
            lines = raw.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1]
            headers = {k.strip().lower(): v.strip() for k, _, v in
                       (ln.partition(":") for ln in lines[1:] if ":" in ln)}
            n = int(headers.get("content-length", "0"))
            body = await reader.readexactly(n) if n else b""
            await self.route(path, headers, body, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def route(self, path: str, headers: dict, body: bytes, writer) -> None:
        echo = f"{headers.get('authorization', '')} {LEAK}"
        if path in ("/metrics", "/tokenize"):
            return await self.control(path, body, writer)
        if path.split("?", 1)[0] in SLEEP_PATHS:
            return await self.sleep_mode(path, writer)
        rid = headers.get("x-request-id")
        mode = headers.get("x-hostile", "good") if rid else (self.a.probe or "good")
        if mode == "all":  # every misbehaviour in turn
            mode = ALL[self.n % len(ALL)]
            self.n += 1
        if rid and self.seen is not None:
            self.seen.write(f"{rid} {mode}\n")
        await MODES[mode](writer, echo)

    async def sleep_mode(self, path: str, writer) -> None:
        if self.seen is not None:
            self.seen.write(f"- {path}\n")
        mode = self.a.sleep_mode
        if mode == "silence":
            await asyncio.sleep(3600)
        elif mode == "continue_loop":
            while True:
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                await writer.drain()
                await asyncio.sleep(0.3)
        data = b'{"is_sleeping": false}' if path.startswith("/is_sleeping") else b"{}"
        writer.write(head(200, "application/json", length=len(data)) + data)
        await writer.drain()

    async def control(self, path: str, body: bytes, writer) -> None:
        mode = self.a.control
        if mode == "gzip_bomb":
            writer.write(head(200, "text/plain", "Content-Encoding: gzip\r\n", len(BOMB)) + BOMB)
        elif mode == "huge":
            writer.write(head(200, "text/plain"))
            block = chunked(b"vllm:generation_tokens_total 1\n" * 32768)  # 1 MiB a chunk
            for _ in range(64):
                writer.write(block)
                await writer.drain()
        elif mode == "trickle":
            writer.write(head(200, "text/plain"))
            for _ in range(600):
                writer.write(chunked(b"v"))
                await writer.drain()
                await asyncio.sleep(0.1)
        elif mode == "wrong_types" and path == "/tokenize":
            data = b'{"count": "abc", "tokens": 7}'
            writer.write(head(200, "application/json", length=len(data)) + data)
        elif path == "/tokenize":
            n = len(json.loads(body).get("prompt", "").split())
            data = json.dumps({"count": n}).encode()
            writer.write(head(200, "application/json", length=len(data)) + data)
        else:
            data = b"# EMULATED\nvllm:generation_tokens_total 0\nvllm:request_success_total 0\n"
            writer.write(head(200, "text/plain", length=len(data)) + data)
        await writer.drain()


async def good(w, echo) -> None:
    w.write(head() + chunked(GOOD_CHUNK % 1) + chunked(GOOD_CHUNK % 2) + DONE)


def _bad(payload: bytes, first: bool = False):
    async def mode(w, echo) -> None:
        w.write(bad_stream(payload.replace(b"ECHO", echo.encode()), first))
    return mode


async def endless_event(w, echo) -> None:
    # one event that never ends: 4 MiB of one JSON string, no blank line
    w.write(head() + chunked(b'data: {"echo":"' + echo.encode()))
    block = chunked(b"a" * 65536)
    for _ in range(64):
        w.write(block)
        await w.drain()
    await asyncio.sleep(30)


async def trickle(w, echo) -> None:
    # a valid stream, one byte every 50 ms: only the total timeout ends it
    w.write(head())
    for byte in (GOOD_CHUNK % 1) * 100:
        w.write(chunked(bytes([byte])))
        await w.drain()
        await asyncio.sleep(0.05)


async def endless_chunks(w, echo) -> None:
    # a well-formed stream far past 4 x max_tokens events: tokens that were never asked for
    w.write(head())
    for n in range(1, 2001):
        w.write(chunked(GOOD_CHUNK % n))
        if n % 100 == 0:
            await w.drain()
    w.write(DONE)


async def close_before_headers(w, echo) -> None:
    w.transport.abort()


async def headers_then_silence(w, echo) -> None:
    w.write(head())
    await w.drain()
    await asyncio.sleep(30)


async def html_200(w, echo) -> None:
    page = f"<html><body>\n\n<h1>Login</h1>\n\n<p>{echo}</p></body></html>".encode()
    w.write(head(200, "text/html", length=len(page)) + page)


async def broken_chunked(w, echo) -> None:
    w.write(head() + chunked(GOOD_CHUNK % 1) + b"zz-not-hex\r\n" + echo.encode() + b"\r\n")
    await w.drain()
    await asyncio.sleep(1)


async def bad_status_line(w, echo) -> None:
    w.write(b"HTTP/1.1 two-hundred OK\r\n" + echo.encode() + b"\r\n\r\n")


async def http_500_echo(w, echo) -> None:
    data = json.dumps({"error": {"message": f"upstream refused {echo}"}}).encode()
    w.write(head(500, "application/json", length=len(data)) + data)


async def huge_error_body(w, echo) -> None:
    w.write(head(500, "text/plain") + chunked(echo.encode()))
    block = chunked(b"x" * 65536)
    for _ in range(256):  # 16 MiB that no one should read
        w.write(block)
        await w.drain()


async def error_event(w, echo) -> None:
    w.write(bad_stream(json.dumps({"error": {"message": f"engine failed: {echo}"}}).encode()))


async def cut_mid_stream(w, echo) -> None:
    w.write(head() + chunked(GOOD_CHUNK % 1) + chunked(b"data: {\"echo\": \"" + echo.encode()))
    await w.drain()
    w.transport.abort()


MODES = {
    "good": good,
    "choices_int": _bad(b'{"choices":[1],"echo":"ECHO"}'),
    # usage beside a broken choices list, mid-stream: the usage fast path must not count it
    "choices_int_usage": _bad(b'{"choices":[1],"usage":{"prompt_tokens":3,"completion_tokens":2}}'),
    "choices_null_usage": _bad(b'{"choices":null,"usage":{"prompt_tokens":3,"completion_tokens":2}}'),
    "endless_chunks": endless_chunks,
    "tokens_str": _bad(b'{"choices":[{"text":"a"}],"usage":{"completion_tokens":"abc"},"echo":"ECHO"}'),
    "tokens_2_63": _bad(b'{"choices":[{"text":"a"}],"usage":{"completion_tokens":9223372036854775808}}'),
    "tokens_10_digits": _bad(b'{"choices":[{"text":"a"}],"usage":{"completion_tokens":9999999999}}'),
    "tokens_negative": _bad(b'{"choices":[{"text":"a"}],"usage":{"completion_tokens":-5}}'),
    "tokens_float": _bad(b'{"choices":[{"text":"a"}],"usage":{"completion_tokens":2.5}}'),
    "tokens_down": _bad(b'{"choices":[{"text":"a"}],"usage":{"completion_tokens":0}}'),
    "prompt_tokens_str": _bad(b'{"choices":[{"text":"a"}],"usage":{"prompt_tokens":"x","completion_tokens":2}}',
                              first=True),
    "usage_list": _bad(b'{"choices":[{"text":"a"}],"usage":[2]}'),
    "delta_int": _bad(b'{"choices":[{"delta":5}]}'),
    "text_int": _bad(b'{"choices":[{"text":5}]}'),
    "choices_str": _bad(b'{"choices":"abc"}'),
    "deep_nesting": _bad(b"[" * 200_000 + b"]" * 200_000),
    "huge_int": _bad(b'{"choices":[{"text":"' + b'a"}],"usage":{"completion_tokens":' + b"9" * 5000 + b"}}"),
    "not_json": _bad(b"{ECHO"),
    "non_utf8": _bad(b'{"choices":[{"text":"\xff\xfe\xfd"}]}'),
    # reasoning models and image prompts: a field of the wrong type is a protocol_error
    "reasoning_int": _bad(b'{"choices":[{"delta":{"reasoning_content":5}}],"echo":"ECHO"}'),
    "reasoning_object": _bad(b'{"choices":[{"index":0,"text":"","reasoning":{"x":1}}],'
                             b'"usage":{"completion_tokens":2}}'),
    "reasoning_tokens_str": _bad(b'{"choices":[],"usage":{"completion_tokens":1,'
                                 b'"completion_tokens_details":{"reasoning_tokens":"x"}}}'),
    "reasoning_tokens_negative": _bad(b'{"choices":[],"usage":{"completion_tokens":1,'
                                      b'"completion_tokens_details":{"reasoning_tokens":-2}}}'),
    "image_tokens_negative": _bad(b'{"choices":[{"text":"a"}],"usage":{"prompt_tokens":3,'
                                  b'"completion_tokens":1,"prompt_tokens_details":'
                                  b'{"image_tokens":-1}}}', first=True),
    "endless_event": endless_event,
    "trickle": trickle,
    "close_before_headers": close_before_headers,
    "headers_then_silence": headers_then_silence,
    "html_200": html_200,
    "broken_chunked": broken_chunked,
    "bad_status_line": bad_status_line,
    "http_500_echo": http_500_echo,
    "huge_error_body": huge_error_body,
    "error_event": error_event,
    "cut_mid_stream": cut_mid_stream,
}

ALL = sorted(MODES)


async def serve(a: argparse.Namespace) -> None:
    srv = Hostile(a)
    server = await asyncio.start_server(srv.handle, "127.0.0.1", 0, limit=1 << 20)
    port = server.sockets[0].getsockname()[1]
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(port))
    os.replace(tmp, a.port_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--port-file", required=True)
    p.add_argument("--seen")
    p.add_argument("--probe", choices=sorted(MODES))
    p.add_argument("--control", choices=["gzip_bomb", "huge", "trickle", "wrong_types"])
    p.add_argument("--sleep-mode", choices=["silence", "continue_loop", "good"], default="good")
    asyncio.run(serve(p.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
