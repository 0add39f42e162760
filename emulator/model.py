"""The performance model: how long one engine step takes on a configuration.

All times are *modelled* seconds on the target hardware (EMULATED, uncalibrated
unless docs/emulator.md says otherwise). One continuous-batching step processes
`prefill` prompt tokens and `decode` generated tokens together:

  weights read  = dense params × B/param + touched(n) × expert params × B/param
  touched(n)    = E · (1 − (1 − 1/E)^n)       top-1 routing of n tokens over E experts
  KV read       = Σ decode contexts × KV bytes/token (local layers capped at the chunk)
  memory time   = (weights read + KV read) / (HBM bandwidth × eff_memory)
  compute time  = 2 × active params × (prefill/eff_prefill + decode/eff_decode) / peak
                  + attention FLOPs / (peak × eff_prefill)
  TP comm       = layers × 2 all-reduces × (latency + 2(tp−1)/tp × n × hidden × 2 B / link)
  step          = max(memory, compute) + TP comm + step overhead
                  + admitted × request overhead (0 unless a fitted spec sets it: a
                  per-request fixed cost such as a Python server's request handling)
"""

from __future__ import annotations

from servingbench.emulator.specs import GB, Config


class PerfModel:
    def __init__(self, cfg: Config, kv_bytes_per_value: float = 2.0):
        """`kv_bytes_per_value`: 2 for a bf16 KV cache, 1 for FP8 (half the bytes read and
        twice the tokens held)."""
        self.cfg = cfg
        m, p, eff = cfg.model, cfg.precision, cfg.efficiency
        self.bpp = p.bytes_per_param
        self.dense_bytes = m.dense_params_b * 1e9 * self.bpp
        self.expert_bytes = m.expert_params_b * 1e9 * self.bpp
        self.experts = m.routed_experts
        self.kv_bytes_per_token = m.kv_bytes_per_token(kv_bytes_per_value)
        self.active_params = m.active_params_b * 1e9
        self.mem_bw = cfg.hbm_bytes_per_s * eff["memory_bandwidth"]
        self.peak = cfg.peak_flops
        self.eff_prefill = eff["prefill_compute"]
        self.eff_decode = eff["decode_compute"]
        neuron = cfg.instance.platform == "neuron"
        self.overhead_s = eff["neuron_step_overhead_ms" if neuron else "step_overhead_ms"] / 1e3
        self.request_overhead_s = eff.get("request_overhead_ms", 0.0) / 1e3
        acc = cfg.instance.accelerator
        self.link_bw = acc.link_gbps * GB * eff["interconnect"]
        self.ar_latency = acc.allreduce_latency_us / 1e6
        # attention: QK^T and PV, 2 FLOPs per multiply-add, per query-key pair per layer
        self.attn_flops_per_pair = 4 * m.attention_heads * m.head_dim
        self.layers = m.layers
        self.global_frac = 1.0 / m.global_attention_every
        self.chunk = m.attention_chunk_size

    # --- pieces -----------------------------------------------------------------------------
    def touched_experts(self, n_tokens: int) -> float:
        """Expected routed experts touched by n tokens with top-1 routing over E experts."""
        e = self.experts
        return e * (1.0 - (1.0 - 1.0 / e) ** max(n_tokens, 0))

    def effective_context(self, ctx: int) -> float:
        """Keys one query reads per layer, averaged: global layers read all, local ≤ chunk."""
        return self.global_frac * ctx + (1 - self.global_frac) * min(ctx, self.chunk)

    def prefill_pairs(self, start: int, count: int) -> float:
        """Σ over query positions p in [start, start+count) of effective_context(p)."""
        end = start + count
        full = (start + end - 1) * count / 2.0
        lo, hi = min(start, self.chunk), min(end, self.chunk)
        local = (lo + hi - 1) * (hi - lo) / 2.0 if hi > lo else 0.0
        local += max(0, end - max(start, self.chunk)) * self.chunk
        return self.global_frac * full + (1 - self.global_frac) * local

    def comm_time(self, n_tokens: int) -> float:
        tp = self.cfg.tp
        if tp == 1 or n_tokens == 0:
            return 0.0
        payload = n_tokens * self.cfg.model.hidden_size * 2
        per = self.ar_latency + 2 * (tp - 1) / tp * payload / self.link_bw
        return self.layers * 2 * per

    # --- one step ------------------------------------------------------------------------------
    def step_time(self, prefill: int, decode: int, kv_tokens_read: float = 0.0,
                  attn_pairs: float = 0.0, admitted: int = 0) -> float:
        """Modelled seconds of one step; kv_tokens_read and attn_pairs already effective;
        `admitted` requests start their prefill in this step."""
        n = prefill + decode
        if n == 0:
            return 0.0
        weights = self.dense_bytes + self.touched_experts(n) * self.expert_bytes
        memory = (weights + kv_tokens_read * self.kv_bytes_per_token) / self.mem_bw
        gemm = 2 * self.active_params * (prefill / self.eff_prefill + decode / self.eff_decode)
        attn = attn_pairs * self.attn_flops_per_pair * self.layers / self.eff_prefill
        compute = (gemm + attn) / self.peak
        return (max(memory, compute) + self.comm_time(n) + self.overhead_s
                + admitted * self.request_overhead_s)

    def decode_step(self, batch: int, context: int) -> float:
        """A pure decode step: `batch` sequences, each with `context` tokens of KV."""
        eff_ctx = self.effective_context(context)
        return self.step_time(0, batch, batch * eff_ctx, batch * eff_ctx)

    def prefill_time(self, prompt_tokens: int, budget: int = 8192) -> float:
        """TTFT of a lone request: its prompt in chunks of `budget` tokens, back to back."""
        t, done = 0.0, 0
        while done < prompt_tokens:
            c = min(budget, prompt_tokens - done)
            t += self.step_time(c, 0, 0.0, self.prefill_pairs(done, c), int(done == 0))
            done += c
        return t

    # --- cold start ----------------------------------------------------------------------------
    def cold_start_phases(self) -> list[tuple[str, float]]:
        """Modelled seconds per deploy sub-phase: weights_load, compile (Neuron), ready."""
        cs = self.cfg.cold_start
        phases = [("weights_load", self.cfg.weights_bytes / (cs["weights_load_gbps"] * GB))]
        if self.cfg.instance.platform == "neuron":
            phases += [("compile", cs["neuron_compile_s"]), ("ready", cs["neuron_ready_s"])]
        else:
            phases.append(("ready", cs["graph_capture_s"]))
        return phases

    def replica_phases(self) -> list[tuple[str, float]]:
        """Modelled seconds per start-up phase of a replica added to a running deployment
        (contract §2.6 `replica_phase`): the engine image pulled onto its node, the weights
        loaded (scaled by the model's size), the graphs compiled (Neuron; on a GPU vLLM's
        torch.compile is cached after the first replica), the CUDA graphs captured or the
        Neuron warm-up."""
        cs = self.cfg.cold_start
        phases = [("image_pull", cs.get("image_pull_s", 0.0)),
                  ("weights_load", self.cfg.weights_bytes / (cs["weights_load_gbps"] * GB))]
        if self.cfg.instance.platform == "neuron":
            phases += [("compile", cs["neuron_compile_s"]), ("graph_capture", cs["neuron_ready_s"])]
        else:
            phases.append(("graph_capture", cs["graph_capture_s"]))
        return phases

    def kv_capacity_tokens(self, kv_capacity_gb: float) -> int:
        return max(0, int(kv_capacity_gb * GB // self.kv_bytes_per_token))
