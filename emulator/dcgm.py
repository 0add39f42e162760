"""The emulator's modelled accelerator state in DCGM exporter names (EMULATED, labelled
`emulated="true"`), appended to /metrics so one scrape gives the engine gauges and the
device series, as a GPU node's dcgm-exporter would beside vLLM.

Per device of the TP group (all devices of the group do the same work, so they share one
series; the labels tell them apart):

  utilization   = busy time of engine steps in the trailing second / 1 s
  memory used   = weights / tp + runtime overhead + KV in use / tp      (bytes)
  memory total  = the accelerator's memory
  power         = idle_w + (max_w − idle_w) × utilization              (stated model, W)
  energy        = idle_w × uptime + (max_w − idle_w) × busy time        (the exact integral
                                                                         of that power, mJ)

A real vLLM preallocates its KV pool, so a real GPU's FB_USED stays near
`gpu_memory_utilization × total` whatever the load; the modelled figure counts the KV
actually in use instead, and `vllm:kv_cache_usage_perc` is the fullness signal either way.
Power figures are board limits and idle draws, not measurements of inference: uncalibrated.
"""

from __future__ import annotations

import collections
import time

from servingbench.emulator import specs

WINDOW_NS = 1_000_000_000
MIB = 1 << 20

# accelerator → (idle W, max W). Max: the board power limit from the vendor datasheet;
# idle: assumption (~10 % of the limit, typical of an idle data-centre board).
POWER_W = {
    "H100-SXM-80GB": (70.0, 700.0),     # NVIDIA H100 SXM datasheet: up to 700 W
    "H200-SXM-141GB": (70.0, 700.0),    # NVIDIA H200 SXM datasheet: up to 700 W
    "B200-SXM-180GB": (100.0, 1000.0),  # NVIDIA DGX B200 datasheet: up to 1,000 W a GPU
    "A100-SXM4-80GB": (50.0, 400.0),    # NVIDIA A100 SXM datasheet: 400 W
    "A100-SXM4-40GB": (50.0, 400.0),    # NVIDIA A100 SXM datasheet: 400 W
    "L40S-48GB": (35.0, 350.0),         # NVIDIA L40S datasheet: 350 W
    "Trainium2": (50.0, 500.0),         # assumption: AWS publishes no per-chip power
    "Inferentia2": (20.0, 200.0),       # assumption: AWS publishes no per-chip power
}


class DeviceModel:
    def __init__(self, cfg: specs.Config, overhead_gb: float, kv_capacity_tokens: int,
                 kv_bytes_per_token: float):
        acc = cfg.instance.accelerator
        self.tp, self.neuron = cfg.tp, cfg.instance.platform == "neuron"
        self.model_name = f"{acc.name} (EMULATED)"
        self.total_bytes = acc.memory_gb * specs.GB
        self.static_bytes = cfg.weights_bytes / cfg.tp + overhead_gb * specs.GB
        self.kv_bytes_full = kv_capacity_tokens * kv_bytes_per_token / cfg.tp
        self.idle_w, self.max_w = POWER_W.get(acc.name, (50.0, 500.0))
        self.start_ns = time.perf_counter_ns()
        self.steps: collections.deque[tuple[int, int]] = collections.deque()
        self.busy_ns = 0  # planned busy time, the current step included

    def step(self, start_ns: int, end_ns: int) -> None:
        """An engine step occupies the devices over [start_ns, end_ns] (perf ns)."""
        self.steps.append((start_ns, end_ns))
        self.busy_ns += end_ns - start_ns
        while self.steps and self.steps[0][1] < start_ns - 2 * WINDOW_NS:
            self.steps.popleft()

    def busy_until(self, now: int) -> int:
        future = 0
        if self.steps:
            s, e = self.steps[-1]
            future = min(e - s, max(0, e - now))
        return self.busy_ns - future

    def utilization(self, now: int) -> float:
        lo = now - WINDOW_NS
        busy = sum(max(0, min(e, now) - max(s, lo)) for s, e in self.steps)
        return min(1.0, busy / WINDOW_NS)

    def lines(self, kv_usage: float) -> list[str]:
        now = time.perf_counter_ns()
        util = self.utilization(now)
        used = min(self.total_bytes, self.static_bytes + kv_usage * self.kv_bytes_full)
        used_mib = round(used / MIB)
        power = self.idle_w + (self.max_w - self.idle_w) * util
        energy_j = (self.idle_w * (now - self.start_ns)
                    + (self.max_w - self.idle_w) * self.busy_until(now)) / 1e9
        values = {
            "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %).", round(util * 100.0, 3)),
            # whole MiB, as DCGM reports framebuffer
            "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB).", used_mib),
            "DCGM_FI_DEV_FB_FREE": ("gauge", "Framebuffer memory free (in MiB).",
                                    int(self.total_bytes // MIB) - used_mib),
            "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W).", round(power, 3)),
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": (
                "counter", "Total energy consumption since boot (in mJ).", round(energy_j * 1e3, 3)),
        }
        out = ["# EMULATED: modelled device state in DCGM exporter names (docs/telemetry.md)"]
        for name, (kind, help_text, value) in values.items():
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            for i in range(self.tp):
                device = f"neuron{i}" if self.neuron else f"nvidia{i}"
                out.append(f'{name}{{gpu="{i}",device="{device}",modelName="{self.model_name}",'
                           f'emulated="true"}} {value}')
        return out
