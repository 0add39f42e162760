"""The engine process's own host usage (a local engine: llama.cpp on this host), by psutil."""

from __future__ import annotations

from servingbench.resources.telemetry.name_maps import Row
from servingbench.resources.telemetry.sources import SourceError


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


PLUGIN = {"host": lambda s, t: HostProcessSource(int(s["pid"]))}
