"""Prometheus text exposition → samples: the one parser for every `/metrics` read (the load
generator's engine counters, the telemetry sampler's DCGM and engine gauges)."""

from __future__ import annotations

import re

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Samples = dict[str, list[tuple[dict[str, str], float]]]


def parse(text: str) -> Samples:
    """{sample name: [(labels, value)]}; comments and unparseable lines are skipped, so a
    half-written exposition yields what it has. A NaN sample (an exporter with no reading)
    is skipped too: it is never recorded as a value."""
    out: Samples = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if value != value:
            continue
        out.setdefault(m.group(1), []).append((dict(_LABEL.findall(m.group(2) or "")), value))
    return out
