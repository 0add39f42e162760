"""Prometheus text exposition with vLLM's metric names (EMULATED values).

`generation_skew` multiplies the exposed generation-token counter (a deliberately
wrong server count for reconciliation tests); everything else is exact.
"""

from __future__ import annotations

import bisect

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # vLLM's buckets
LAG_BUCKETS = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


class Histogram:
    def __init__(self, buckets: tuple[float, ...]):
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.total = 0
        self.sum = 0.0

    def observe(self, v: float) -> None:
        i = bisect.bisect_left(self.buckets, v)
        if i < len(self.counts):
            self.counts[i] += 1
        self.total += 1
        self.sum += v

    def lines(self, name: str, labels: str) -> list[str]:
        out, cum = [], 0
        for b, c in zip(self.buckets, self.counts, strict=True):
            cum += c
            out.append(f'{name}_bucket{{{labels},le="{b}"}} {cum}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.total}')
        out.append(f"{name}_count{{{labels}}} {self.total}")
        out.append(f"{name}_sum{{{labels}}} {self.sum}")
        return out


class Metrics:
    def __init__(self, model_name: str, generation_skew: float = 1.0):
        self.labels = f'engine="0",model_name="{model_name}"'
        self.skew = generation_skew
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.success: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}
        self.ttft = Histogram(TTFT_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.write_lag = Histogram(LAG_BUCKETS)  # the emulator's own lateness, per chunk
        self.running = 0
        self.waiting = 0
        self.kv_usage = 0.0
        self.devices = None  # emulator.dcgm.DeviceModel when the performance model runs
        # the scheduler's and the prefix cache's own counts (vLLM's names), when they run
        self.preemptions: int | None = None
        self.prefix_cache = None  # emulator.prefix_cache.PrefixCache
        self.spec = None  # emulator.speculative.Speculative when speculative decoding is on

    def render(self) -> bytes:
        lb = self.labels
        gen = self.generation_tokens * self.skew
        lines = [
            "# EMULATED: servingbench engine emulator, not a real vLLM",
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{lb}}} {float(self.running)}",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{lb}}} {float(self.waiting)}",
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{lb}}} {self.kv_usage}",
            "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage (deprecated name).",
            "# TYPE vllm:gpu_cache_usage_perc gauge",
            f"vllm:gpu_cache_usage_perc{{{lb}}} {self.kv_usage}",
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{lb}}} {float(self.prompt_tokens)}",
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{lb}}} {float(round(gen))}",
            "# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
        ]
        lines += [f'vllm:request_success_total{{{lb},finished_reason="{k}"}} {float(v)}'
                  for k, v in self.success.items()]
        lines += ["# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
                  "# TYPE vllm:time_to_first_token_seconds histogram"]
        lines += self.ttft.lines("vllm:time_to_first_token_seconds", lb)
        lines += ["# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.",
                  "# TYPE vllm:e2e_request_latency_seconds histogram"]
        lines += self.e2e.lines("vllm:e2e_request_latency_seconds", lb)
        lines += ["# HELP servingbench:emulator_write_lag_seconds Chunk written minus scheduled "
                  "(the emulator's own lateness; p99 > 2 ms means discard the run).",
                  "# TYPE servingbench:emulator_write_lag_seconds histogram"]
        lines += self.write_lag.lines("servingbench:emulator_write_lag_seconds", lb)
        if self.preemptions is not None:
            lines += ["# HELP vllm:num_preemptions_total Cumulative number of preemption from "
                      "the engine.", "# TYPE vllm:num_preemptions_total counter",
                      f"vllm:num_preemptions_total{{{lb}}} {float(self.preemptions)}"]
        if self.prefix_cache is not None:
            pc = self.prefix_cache
            lines += ["# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms "
                      "of number of queried tokens.", "# TYPE vllm:prefix_cache_queries_total "
                      "counter", f"vllm:prefix_cache_queries_total{{{lb}}} {float(pc.queries)}",
                      "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of "
                      "number of cached tokens.", "# TYPE vllm:prefix_cache_hits_total counter",
                      f"vllm:prefix_cache_hits_total{{{lb}}} {float(pc.hits)}"]
        if self.spec is not None:  # vLLM V1's speculative-decoding counters
            lines += [
                "# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.",
                "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
                f"vllm:spec_decode_num_draft_tokens_total{{{lb}}} {float(self.spec.drafted)}",
                "# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.",
                "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
                f"vllm:spec_decode_num_accepted_tokens_total{{{lb}}} {float(self.spec.accepted)}",
            ]
        if self.devices is not None:
            lines += self.devices.lines(self.kv_usage)
        return ("\n".join(lines) + "\n").encode()
