"""What the sampler reads, one class per kind of endpoint. Each `sample()` returns rows
`(device, metric, value)` or raises; the sampler turns a raise into a `sample_error` row.

Every HTTP read goes through the project's bounded control reads (resources/http/control.py):
an overall deadline, a byte cap and no decompression, so a trickling, silent, flooding or
gzip-bombing exporter costs one tick at most and never the run (nor its teardown).
"""

from __future__ import annotations

import json

import httpx

from resources.http import control
from resources.http.prometheus import parse
from resources.telemetry import neuron
from resources.telemetry.name_maps import Row, dcgm_rows, engine_rows

MAX_BYTES = 4 << 20  # a DCGM exposition of 8 GPUs is ~40 KB; anything far larger is not one


class SourceError(RuntimeError):
    pass


def _get(client: httpx.Client, url: str, deadline_s: float) -> bytes:
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


class PrometheusSource:
    """A Prometheus endpoint read with one or both maps: DCGM fields (`dcgm=True`) and the
    engine's gauges (`engine=True`). The emulator serves both on its /metrics."""

    def __init__(self, url: str, source: str, *, dcgm: bool, engine: bool,
                 timeout_s: float = 0.8):
        self.url, self.source, self.dcgm, self.engine = url, source, dcgm, engine
        self.error_device = "engine" if engine and not dcgm else "all"
        self.deadline_s = timeout_s
        self.client = httpx.Client(timeout=httpx.Timeout(timeout_s), trust_env=False)

    def sample(self) -> list[Row]:
        samples = parse(_get(self.client, self.url, self.deadline_s).decode("utf-8", "replace"))
        rows = (dcgm_rows(samples) if self.dcgm else []) + (engine_rows(samples) if self.engine else [])
        if not rows:
            raise SourceError(f"GET {self.url}: none of the expected metrics")
        return rows

    def close(self) -> None:
        self.client.close()


class NeuronMonitorSource:
    """The latest neuron-monitor JSON report, served over HTTP by the sidecar beside
    neuron-monitor (deploy/neuron-monitor.yaml)."""

    source = "neuron_monitor"
    error_device = "all"

    def __init__(self, url: str, timeout_s: float = 0.8):
        self.url, self.deadline_s = url, timeout_s
        self.client = httpx.Client(timeout=httpx.Timeout(timeout_s), trust_env=False)

    def sample(self) -> list[Row]:
        try:
            report = json.loads(_get(self.client, self.url, self.deadline_s))
        except ValueError as exc:
            raise SourceError(f"GET {self.url}: not a JSON report ({exc})") from None
        rows = neuron.rows(report)
        if not rows:
            raise SourceError(f"GET {self.url}: report without NeuronCore data")
        return rows

    def close(self) -> None:
        self.client.close()


class HostProcessSource:
    """CPU and resident memory of a local engine process and its children (psutil).

    CPU is the share of all cores since the previous sample (psutil's `cpu_percent` with no
    interval), so the first reading after construction covers the time since then.
    """

    source = "host"
    error_device = "host"

    def __init__(self, pid: int):
        import psutil

        self.psutil = psutil
        self.proc = psutil.Process(pid)
        self.cores = psutil.cpu_count() or 1
        self.seen: dict[int, object] = {}
        self._processes()

    def _processes(self) -> list:
        procs = [self.proc] + self.proc.children(recursive=True)
        for p in procs:
            if p.pid not in self.seen:
                self.seen[p.pid] = p
                p.cpu_percent(None)  # primes the counter; the first call always says 0
        return [self.seen[p.pid] for p in procs]

    def sample(self) -> list[Row]:
        try:
            gone = self.proc.status() == self.psutil.STATUS_ZOMBIE  # exited, not yet reaped
        except self.psutil.NoSuchProcess:
            gone = True
        if gone:
            raise SourceError(f"engine process {self.proc.pid} is gone")
        cpu = mem = 0.0
        for p in self._processes():
            try:
                cpu += p.cpu_percent(None)
                rss = p.memory_info().rss
            except self.psutil.NoSuchProcess:
                rss = 0
            # a live process always has resident pages; none means it died while being read
            if p.pid == self.proc.pid and rss == 0:
                raise SourceError(f"engine process {p.pid} is gone")
            mem += rss
        # psutil's per-process percentage divides CPU time by a wall interval measured a little
        # apart from it, so a process using every core can read a few % over; the contract's
        # unit is a share of all cores, 0-1
        return [("host", "host_cpu_util", min(1.0, cpu / 100.0 / self.cores)),
                ("host", "host_mem_used_bytes", mem)]

    def close(self) -> None:
        pass
