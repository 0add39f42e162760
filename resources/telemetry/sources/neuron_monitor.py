"""neuron-monitor's latest JSON report, served over HTTP by the sidecar beside it
(deploy/neuron-monitor.yaml); its rows come from neuron.py."""

from __future__ import annotations

import json

import httpx
from servingbench.resources.http import control
from servingbench.resources.telemetry import neuron
from servingbench.resources.telemetry.name_maps import Row
from servingbench.resources.telemetry.sources import SourceError, fetch


class NeuronMonitorSource:
    """The latest neuron-monitor JSON report, served over HTTP by the sidecar beside
    neuron-monitor (deploy/neuron-monitor.yaml)."""

    source = "neuron_monitor"
    error_device = "all"

    def __init__(self, url: str, timeout_s: float = 0.8):
        self.url, self.deadline_s = url, timeout_s
        # the process's one TLS context (control.tls): a sampler is made per run and source
        self.client = control.client(timeout=httpx.Timeout(timeout_s), trust_env=False)

    def sample(self) -> list[Row]:
        try:
            report = json.loads(fetch(self.client, self.url, self.deadline_s))
        except ValueError as exc:
            raise SourceError(f"GET {self.url}: not a JSON report ({exc})") from None
        rows = neuron.rows(report)
        if not rows:
            raise SourceError(f"GET {self.url}: report without NeuronCore data")
        return rows

    def close(self) -> None:
        self.client.close()


PLUGIN = {"neuron_monitor": lambda s, t: NeuronMonitorSource(s["url"], **t)}
