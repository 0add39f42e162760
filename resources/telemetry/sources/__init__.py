"""What the sampler reads, one file per kind of endpoint: `sources/<source>.py` defines its
source class and ends with `PLUGIN = {kind: build}`, the `Deployment.telemetry` kinds it
serves (`{"kind": …, "url" | "pid": …}` -> a source). Each source's `sample()` returns rows `(device, metric, value)` or
raises; the sampler turns a raise into a `sample_error` row.

Every HTTP read goes through the project's bounded control reads (resources/http/control.py):
an overall deadline, a byte cap and no decompression, so a trickling, silent, flooding or
gzip-bombing exporter costs one tick at most and never the run (nor its teardown). Adding a
source is adding one file here.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
from servingbench.resources.contract.discovery import plugins
from servingbench.resources.http import control

MAX_BYTES = 4 << 20  # a DCGM exposition of 8 GPUs is ~40 KB; anything far larger is not one

# a description (`{"kind": …, …}`) and the read timeout ({} or {"timeout_s": …}) -> a source
Build = Callable[[dict, dict], object]


class SourceError(RuntimeError):
    pass


def fetch(client: httpx.Client, url: str, deadline_s: float) -> bytes:
    try:
        resp, body = control.request(client, "GET", url, max_bytes=MAX_BYTES,
                                     deadline_s=deadline_s)
    except control.ControlError as exc:
        raise SourceError(f"GET {exc}") from None
    if resp.status_code != 200:
        raise SourceError(f"GET {url}: HTTP {resp.status_code}")
    if resp.headers.get("content-encoding", "identity").lower() not in ("", "identity"):
        # asked for identity: a compressed answer is refused, never inflated
        raise SourceError(f"GET {url}: {resp.headers['content-encoding']}-encoded answer")
    return body


def discover(path, package: str) -> dict[str, Build]:
    """Every kind the files of the package at `path` serve. A file without `PLUGIN` (a
    mapping of kind -> callable), or a kind another file serves, is an ImportError naming the
    file: a broken source must stop the sampler's start, never vanish from the kinds."""
    found: dict[str, tuple[Build, str]] = {}
    for kinds, _, where in plugins(
            path, package, lambda v: isinstance(v, dict) and all(map(callable, v.values())),
            "{kind: (description, timeout) -> source}"):
        for kind, build in kinds.items():
            if kind in found:
                raise ImportError(f"{where}: telemetry source kind {kind!r} is already "
                                  f"served by {found[kind][1]}")
            found[kind] = (build, where)
    return {kind: build for kind, (build, _) in found.items()}


KINDS = discover(__path__, __name__)


def build(specs: list[dict], timeout_s: float | None = None) -> list:
    """Sources from a deployment's plain descriptions (`Deployment.telemetry`)."""
    t = {} if timeout_s is None else {"timeout_s": timeout_s}
    out = []
    for s in specs:
        make = KINDS.get(s["kind"])
        if make is None:
            raise ValueError(f"telemetry source kind {s['kind']!r}: expected "
                             + ", ".join(sorted(KINDS)))
        out.append(make(s, t))
    return out
