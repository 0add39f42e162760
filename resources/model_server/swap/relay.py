"""The swap driver's byte relay: one request's answer from an engine to the client, chunk by
chunk as it comes, every read from the engine bounded by a deadline; and the driver's own
error answers. Nothing here knows about models or swapping (driver.py)."""

from __future__ import annotations

import asyncio
import json


class UpstreamTimeout(Exception):
    """The engine sent nothing within the read deadline; `started` says whether part of its
    answer already went to the client (then only closing the connection is left)."""

    def __init__(self, started: bool) -> None:
        super().__init__("no answer from the engine within the read deadline")
        self.started = started


def headers_of(head: bytes) -> dict[str, str]:
    out = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip().lower()] = value.strip()
    return out


def model_of(body: bytes) -> str | None:
    if not body:
        return None
    try:
        name = json.loads(body).get("model")
    except (ValueError, AttributeError):
        return None
    return name if isinstance(name, str) else None


def error_answer(status: int, reason: str, message: str) -> bytes:
    """A JSON error as OpenAI-compatible servers send one (the load generator keeps its text,
    redacted, as the request's error)."""
    msg = json.dumps({"error": {"message": message, "code": status}}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(msg)}\r\n\r\n").encode() + msg


async def relay(up: asyncio.StreamReader, down: asyncio.StreamWriter, idle_s: float) -> bool:
    """One response from upstream to the client, each chunk sent on as it comes; whether the
    upstream connection stays open. Every read from upstream has `idle_s` to bring bytes
    (a stream that pauses longer than that is cut: UpstreamTimeout)."""
    started = False

    async def read(op):
        try:
            return await asyncio.wait_for(op, idle_s)
        except TimeoutError:
            raise UpstreamTimeout(started) from None

    head = await read(up.readuntil(b"\r\n\r\n"))
    down.write(head)
    started = True
    headers = headers_of(head)
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            line = await read(up.readuntil(b"\r\n"))
            size = int(line.split(b";", 1)[0], 16)
            if size == 0:
                down.write(line)
                while True:  # trailers, then the empty line
                    t = await read(up.readuntil(b"\r\n"))
                    down.write(t)
                    if t == b"\r\n":
                        break
                break
            down.write(line + await read(up.readexactly(size + 2)))
            await down.drain()
    elif "content-length" in headers:
        down.write(await read(up.readexactly(int(headers["content-length"]))))
    else:
        while part := await read(up.read(1 << 16)):
            down.write(part)
            await down.drain()
        return False
    await down.drain()
    return headers.get("connection", "").lower() != "close"
