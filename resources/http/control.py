"""Bounded control-plane reads (`/tokenize`, `/metrics`, the probe): every answer is capped
in size and in overall time, and never decompressed.

httpx's timeouts are per operation, so a server trickling one byte per second would keep
a read alive forever, and it inflates gzip by default, so a small body could expand
without bound. Here the raw bytes are read against a byte cap and a deadline, and
`Accept-Encoding: identity` asks the server not to compress at all. The deadline is one
asyncio timeout around connect, head and body, for the synchronous reads too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ssl
from functools import cache

import httpx

IDENTITY = {"Accept-Encoding": "identity"}


@cache
def tls() -> ssl.SSLContext:
    """httpx's default certificate check (its CA bundle), built once per process and shared
    by every control client: building it reads and parses the bundle, ~35 ms of CPU, and a
    control read built it twice (the caller's client and `request`'s own), so a load run's
    probe and prompt sizing spent a tenth of a CPU-second on it, and the autoscaler as much
    on each tick's reads."""
    return httpx.create_ssl_context()


def client(**kw) -> httpx.Client:
    """A control client (the settings `request` reads) with `tls()`."""
    return httpx.Client(verify=tls(), **kw)


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
    httpx.HTTPError for the transport.

    The read runs through `arequest` on a private event loop, so the deadline covers
    connect, the response head and the body together: httpcore's synchronous path reads
    the head in a loop of its own (it skips any number of `100 Continue` answers, and a
    head trickled just under the read timeout lasts until h11's head limit), where a
    check between body parts never runs. The loop lives in a worker thread, so a caller
    inside a running event loop is served too. The client `http` gives the settings
    (timeouts, base URL, headers, redirects, proxy environment; certificates are checked as
    httpx does by default, with `tls()`, and no caller gives a control client other TLS
    settings); its
    pool is not used, so each control read opens its own connection and closes it when it
    ends."""
    def run() -> tuple[httpx.Response, bytes]:
        async def go() -> tuple[httpx.Response, bytes]:
            async with httpx.AsyncClient(timeout=http.timeout, base_url=http.base_url,
                                         headers=http.headers,
                                         follow_redirects=http.follow_redirects,
                                         trust_env=http.trust_env, verify=tls()) as ahttp:
                return await arequest(ahttp, method, url, max_bytes=max_bytes,
                                      deadline_s=deadline_s, headers=headers, **kw)
        return asyncio.run(go())

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="control") as pool:
        return pool.submit(run).result()


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
