"""A Prometheus exporter read with one or both name maps (name_maps.py): DCGM exporter's
fields (`dcgm`), the engine's own gauges (`engine_metrics`), or both from the emulator's
/metrics (`emulated`: its modelled DCGM series and its vLLM gauges)."""

from __future__ import annotations

import httpx
from servingbench.resources.http import control
from servingbench.resources.http.prometheus import parse
from servingbench.resources.telemetry.name_maps import Row, dcgm_rows, engine_rows
from servingbench.resources.telemetry.sources import SourceError, fetch


class PrometheusSource:
    """A Prometheus endpoint read with one or both maps: DCGM fields (`dcgm=True`) and the
    engine's gauges (`engine=True`). The emulator serves both on its /metrics."""

    def __init__(self, url: str, source: str, *, dcgm: bool, engine: bool,
                 timeout_s: float = 0.8):
        self.url, self.source, self.dcgm, self.engine = url, source, dcgm, engine
        self.error_device = "engine" if engine and not dcgm else "all"
        self.deadline_s = timeout_s
        # the process's one TLS context (control.tls): a sampler is made per run and source
        self.client = control.client(timeout=httpx.Timeout(timeout_s), trust_env=False)

    def sample(self) -> list[Row]:
        samples = parse(fetch(self.client, self.url, self.deadline_s).decode("utf-8", "replace"))
        rows = (dcgm_rows(samples) if self.dcgm else []) + (engine_rows(samples) if self.engine else [])
        if not rows:
            raise SourceError(f"GET {self.url}: none of the expected metrics")
        return rows

    def close(self) -> None:
        self.client.close()


PLUGIN = {
    "dcgm": lambda s, t: PrometheusSource(s["url"], "dcgm", dcgm=True, engine=False, **t),
    "engine_metrics": lambda s, t: PrometheusSource(s["url"], "engine_metrics", dcgm=False,
                                                    engine=True, **t),
    "emulated": lambda s, t: PrometheusSource(s["url"], "emulated", dcgm=True, engine=True, **t),
}
