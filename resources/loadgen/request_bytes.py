"""The parts of an exchange that are not the stream, for the hot path (connections.py): the bytes of
one streaming request as it is handed to a connection (a POST with its Content-Length, the
caller's headers, which may replace the defaults, never the framing: a header that would
break the framing is refused; the Host line and the defaults; each URL's request target
quoted once and kept), and the message of an error answer's body."""

from __future__ import annotations

import json
import re
from urllib.parse import quote, urlsplit

TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
FRAMING = frozenset(("content-length", "transfer-encoding"))
DEFAULT_HEADERS = [(name.lower(), f"{name}: {value}\r\n".encode()) for name, value in (
    ("Content-Type", "application/json"),
    ("Accept", "*/*"),
    # the stream is parsed as it arrives: a compressed one could not be
    ("Accept-Encoding", "identity"),
    ("User-Agent", "servingbench"),
)]


class RequestBytes:
    """Request bytes for one endpoint (`origin`: scheme and netloc; `host_line` its Host)."""

    def __init__(self, origin: tuple[str, str], host_line: bytes) -> None:
        self.origin, self.host_line = origin, host_line
        self.paths: dict[str, bytes] = {}

    def message(self, url: str, headers: dict[str, str], body: bytes) -> bytes:
        """The request's bytes: a POST of `body` with `headers` (they may replace the
        defaults, never the framing); a header that would break the framing is refused."""
        path = self.paths.get(url)
        if path is None:
            parts = urlsplit(url)
            if (parts.scheme, parts.netloc) != self.origin:
                raise ValueError(f"{url!r} is not on this endpoint")
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            path = self.paths[url] = quote(target, safe="/?=&%:@!$'()*+,;~").encode("ascii")
        out = [b"POST ", path, b" HTTP/1.1\r\nContent-Length: %d\r\n" % len(body)]
        given = set()
        for name, value in headers.items():
            low = name.lower()
            if not TOKEN.match(name) or "\r" in value or "\n" in value or "\0" in value:
                raise ValueError(f"request header {name[:40]!r}: not a valid header name or value")
            if low in FRAMING:
                continue
            given.add(low)
            out.append(f"{name}: {value}\r\n".encode())
        if "host" not in given:
            out.append(self.host_line)
        for name, value in DEFAULT_HEADERS:
            if name not in given:
                out.append(value)
        out.append(b"\r\n")
        out.append(body)
        return b"".join(out)


def error_message(body: bytes) -> str:
    try:
        obj = json.loads(body)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)
    except (ValueError, RecursionError):
        return body.decode("utf-8", "replace")
