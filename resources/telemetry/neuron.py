"""neuron-monitor's JSON report → contract §2.5 rows.

Written from the Neuron Monitor User Guide (aws-neuron-sdk,
tools/neuron-sys-tools/neuron-monitor-user-guide.rst, the Neuron 2.x guide that covers
trn2 and `v3d` cores): `neuron_runtime_data[].report.neuroncore_counters.neuroncores_in_use
.<core>.neuroncore_utilization` (percent over the captured period),
`report.memory_used.neuron_runtime_used_bytes.neuron_device` (bytes, all devices of the
application) and `.usage_breakdown.neuroncore_memory_usage.<core>` (bytes per category),
and `neuron_hardware_info.{neuron_device_count, neuron_device_memory_size}`.

Rows: per NeuronCore `nc<i>` utilization and memory; `neuron` the device memory used by
all Neuron applications together and the total of every device, so headroom is one ratio.
A runtime whose `error` is set contributes nothing (the sampler records the gap).
"""

from __future__ import annotations

from servingbench.resources.telemetry.name_maps import Row


def rows(report: dict) -> list[Row]:
    out: list[Row] = []
    used_total, any_memory = 0.0, False
    for runtime in report.get("neuron_runtime_data") or []:
        if runtime.get("error"):
            continue
        rep = runtime.get("report") or {}
        counters = (rep.get("neuroncore_counters") or {}).get("neuroncores_in_use") or {}
        for core, data in sorted(counters.items(), key=lambda kv: int(kv[0])):
            util = (data or {}).get("neuroncore_utilization")
            if util is not None:
                out.append((f"nc{core}", "accel_util", float(util) / 100.0))
        used = (rep.get("memory_used") or {}).get("neuron_runtime_used_bytes") or {}
        if used.get("neuron_device") is not None:
            used_total += float(used["neuron_device"])
            any_memory = True
        per_core = (used.get("usage_breakdown") or {}).get("neuroncore_memory_usage") or {}
        for core, parts in sorted(per_core.items(), key=lambda kv: int(kv[0])):
            out.append((f"nc{core}", "accel_mem_used_bytes",
                        float(sum(v for v in (parts or {}).values() if isinstance(v, int | float)))))
    hw = report.get("neuron_hardware_info") or {}
    if any_memory:
        out.append(("neuron", "accel_mem_used_bytes", used_total))
        if hw.get("neuron_device_count") and hw.get("neuron_device_memory_size") and not hw.get("error"):
            out.append(("neuron", "accel_mem_total_bytes",
                        float(hw["neuron_device_count"]) * float(hw["neuron_device_memory_size"])))
    return out
