"""Bounded control-plane reads (`/tokenize`, `/metrics`, the probe): every answer is capped
in size and in overall time, and never decompressed.

httpx's timeouts are per operation, so a server trickling one byte per second would keep
a read alive forever, and it inflates gzip by default, so a small body could expand
without bound. Here the raw bytes are read against a byte cap and a deadline, and
`Accept-Encoding: identity` asks the server not to compress at all.
"""

from __future__ import annotations

import asyncio
import time

import httpx

IDENTITY = {"Accept-Encoding": "identity"}


class ControlError(Exception):
    """A control-plane answer too large or too slow; the message says which and how much."""


def _headers(headers: dict[str, str] | None) -> dict[str, str]:
    return {**(headers or {}), **IDENTITY}


def _over(url: str, max_bytes: int) -> ControlError:
    return ControlError(f"{url}: answer larger than {max_bytes} bytes")


def _late(url: str, deadline_s: float) -> ControlError:
    return ControlError(f"{url}: no complete answer within {deadline_s:g} s")


def request(http: httpx.Client, method: str, url: str, *, max_bytes: int, deadline_s: float,
            headers: dict[str, str] | None = None, **kw) -> tuple[httpx.Response, bytes]:
    """(response, raw body); raises ControlError past `max_bytes` or `deadline_s`, and
    httpx.HTTPError for the transport. The deadline is checked between reads, each of which
    is bounded by the client's read timeout."""
    end = time.monotonic() + deadline_s
    body = bytearray()
    with http.stream(method, url, headers=_headers(headers), **kw) as r:
        for part in r.iter_raw():
            body += part
            if len(body) > max_bytes:
                raise _over(url, max_bytes)
            if time.monotonic() > end:
                raise _late(url, deadline_s)
    return r, bytes(body)


async def arequest(http: httpx.AsyncClient, method: str, url: str, *, max_bytes: int,
                   deadline_s: float, headers: dict[str, str] | None = None,
                   **kw) -> tuple[httpx.Response, bytes]:
    """`request` for asyncio: the deadline covers connect, headers and body together."""
    body = bytearray()
    try:
        async with asyncio.timeout(deadline_s):
            async with http.stream(method, url, headers=_headers(headers), **kw) as r:
                async for part in r.aiter_raw():
                    body += part
                    if len(body) > max_bytes:
                        raise _over(url, max_bytes)
    except TimeoutError:
        raise _late(url, deadline_s) from None
    return r, bytes(body)
