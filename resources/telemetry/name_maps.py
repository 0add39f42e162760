"""The two name maps the sampler reads a Prometheus exposition with (parsed by
resources/http/prometheus.py): DCGM exporter fields and the engines' own gauges (each
engine's file in model_server/engines/ names its own).

Units are converted here, once, to contract §2.5's: DCGM reports framebuffer in MiB,
utilization in percent and energy in millijoules since boot (dcgm-exporter
etc/default-counters.csv, 4.x: `DCGM_FI_DEV_FB_USED` MiB, `DCGM_FI_DEV_GPU_UTIL` %,
`DCGM_FI_DEV_POWER_USAGE` W, `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` mJ).
"""

from __future__ import annotations

from servingbench.resources.http.prometheus import Samples
from servingbench.resources.model_server import engines

MIB = 1 << 20

Row = tuple[str, str, float]  # (device, metric, value)


def dcgm_device(labels: dict[str, str]) -> str:
    """`gpu<N>` from DCGM's `gpu` label; the emulator names its modelled Neuron devices
    `neuron<N>` in the `device` label, and that name is kept."""
    device = labels.get("device", "")
    if device.startswith("neuron"):
        return device
    return f"gpu{labels.get('gpu', device or '?')}"


# DCGM field → (contract metric, factor to the contract unit)
DCGM_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": ("accel_util", 0.01),
    "DCGM_FI_DEV_FB_USED": ("accel_mem_used_bytes", MIB),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_j", 1e-3),
}
# total framebuffer = used + free (+ reserved, where the exporter reports it)
DCGM_TOTAL_PARTS = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED")


def dcgm_rows(samples: Samples) -> list[Row]:
    rows: list[Row] = []
    for name, (metric, factor) in DCGM_FIELDS.items():
        rows += [(dcgm_device(lb), metric, v * factor) for lb, v in samples.get(name, [])]
    totals: dict[str, float] = {}
    have_free: set[str] = set()
    for name in DCGM_TOTAL_PARTS:
        for lb, v in samples.get(name, []):
            dev = dcgm_device(lb)
            totals[dev] = totals.get(dev, 0.0) + v * MIB
            if name == "DCGM_FI_DEV_FB_FREE":
                have_free.add(dev)
    rows += [(dev, "accel_mem_total_bytes", t) for dev, t in totals.items() if dev in have_free]
    return rows


# contract metric → every engine's gauge names; the first name present wins (vLLM renamed
# its KV gauge)
ENGINE_GAUGES = engines.gauges()


def engine_rows(samples: Samples) -> list[Row]:
    """One `engine` row per gauge: counts summed over engines, KV usage their mean."""
    rows: list[Row] = []
    for metric, names in ENGINE_GAUGES.items():
        for name in names:
            values = [v for _, v in samples.get(name, [])]
            if values:
                total = sum(values)
                rows.append(("engine", metric,
                             total / len(values) if metric == "kv_cache_usage" else total))
                break
    return rows
