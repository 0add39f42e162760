"""The performance model: how long one engine step takes on a configuration.

All times are *modelled* seconds on the target hardware (EMULATED; the fitted figures and
their cross-validated error are in engines.yaml `calibration:`). One step runs `n` query
tokens (prefill chunks and decodes together) through the model; each kind of kernel is its
own roofline, and the kernels run one after another:

  dense     max(dense bytes / BW, 2 · dense params · n / (P · g(n)))   attention projections,
            dense FFNs, shared experts, routers, and the LM head for the rows that sample
  experts   moe_layers · max(touched(n) · expert bytes / BW,
                             2 · top_k · expert params · n / (P · gₑ(n · top_k / touched(n))))
            touched(n) = E · (1 − (1 − top_k / E)^n)   experts a batch of n tokens routes to
            gₑ(r) = r / (r + r½): the grouped GEMM at r rows per expert (r½ per engine stack)
  attention max(KV tokens read · KV bytes per token / BW, query-key pairs · FLOPs per pair / P)
            an engine whose attention runs over the packed batch under a mask (`masked_batch`)
            pairs every query token with every key of the batch, and moves the batch's KV
            (2 + 2 · heads / KV heads) times: gathered from the paged cache, then expanded to
            every head and read
  TP        layers · 2 all-reduces · (latency · log2(ranks) + 2(r−1)/r · n · hidden · 2 B / link)
  overhead  per step + per layer + per batch row · (1 + per layer) (+ per admitted request)
            an engine that launches every kernel from Python each step (`eager`, no CUDA
            graphs) pays per step, and the kernels overlap the launching: the step takes the
            longer of its kernels and its launches (per layer, per MoE layer, per batch row
            and layer)

  BW = datasheet bandwidth × tp × memory efficiency; P = datasheet FLOP/s of the format the
  matrix units run × tp × compute efficiency; g(m) = m / (m + m½), a GEMM's efficiency at m
  rows (small batches and small experts fill the matrix units poorly), times w / (w + w½)
  for a GEMM of w output columns per rank (a wide TP group slices small experts thin), times
  the platform's dequantizing share for weights in a format the matrix units do not run
  (MXFP4 experts on a Hopper: dequantized to 16 bits inside the GEMM).

On Neuron a prompt runs alone through the compiled context-encoding graph, padded to its
bucket, at its own efficiency plus a per-layer cost (`ce` steps), and a MoE layer there runs
every expert over every token (the compiled graph's static shapes); decode steps run the
token-generation graph at its compiled batch, whose MoE layers run every expert over every
row once the batch routes as many slots as there are experts, and below that load each row's
own top-k experts (NxD's selective-loading threshold, 1.0). Every function takes floats or
numpy arrays (the calibration evaluates thousands of steps at once).
"""

from __future__ import annotations

import numpy as np
from servingbench.emulator.specs import GB, Config

ACT_BYTES = 2.0  # bf16 activations in the all-reduces


class PerfModel:
    def __init__(self, cfg: Config, kv_bytes_per_value: float = 2.0):
        """`kv_bytes_per_value`: 2 for a bf16 KV cache, 1 for FP8 (half the bytes read and
        twice the tokens held)."""
        self.cfg = cfg
        m, eff, acc = cfg.model, cfg.efficiency, cfg.instance.accelerator
        self.arch = m
        self.tp = cfg.tp
        dense_b, expert_b = m.part_bytes(cfg.precision.bytes_per_param, cfg.precision.name)
        head_b = cfg.precision.head_bytes
        self.dense_bytes = m.dense_linear_params * dense_b + m.head_params * head_b
        self.expert_bytes = m.expert_params * expert_b  # one expert of one layer
        # weights stored in a format the matrix units do not run (MXFP4 or INT4 on a Hopper or
        # an Ampere GPU) are dequantized inside the GEMM, whose main loop then does more than
        # multiply: such a GEMM reaches `dequant_compute` of the 16-bit rate
        runs = acc.rate(cfg.precision.compute)[0]
        dequantizes = runs != cfg.precision.compute
        self._dense_dequantizes = dequantizes and dense_b < 2.0
        self._expert_dequantizes = dequantizes and expert_b < 2.0
        self.experts, self.top_k, self.moe_layers = m.routed_experts, m.top_k, m.moe_layers
        self.expert_params = m.expert_params
        self.dense_params, self.head_params = m.dense_linear_params, m.head_params
        self.kv_bytes_per_token = m.kv_bytes_per_token(kv_bytes_per_value)
        self.kv_group_bytes = self.kv_bytes_per_token * m.kv_replication(cfg.tp)
        self.layers, self.hidden = m.layers, m.hidden_size
        self.pair_flops_decode = m.decode_pair_flops * m.layers
        self.pair_flops_prefill = m.prefill_pair_flops * m.layers
        self.ranks = cfg.ranks
        # output columns per rank of the widest dense GEMM and of one expert's
        dense_width = max(m.ffn_intermediate, m.attention_heads * max(m.head_dim, 128))
        self.dense_width = dense_width / self.ranks
        self.expert_width = max(m.expert_intermediate, 1) / self.ranks
        self.neuron = cfg.instance.platform == "neuron"
        profile = cfg.profile()
        self.masked_batch = profile.attention == "masked_batch"
        self.eager = profile.launch == "eager"
        self.kv_moves = 2.0 + 2.0 * m.attention_heads / max(m.kv_heads, 1)
        self.link_bw = acc.link_gbps * GB * eff.get("interconnect", 0.7)
        self.set_efficiency(eff)

    @property
    def dequantizes(self) -> bool:
        """Whether some GEMM's weights are in a format the matrix units do not run."""
        return self._dense_dequantizes or self._expert_dequantizes

    def set_efficiency(self, eff: dict[str, float]) -> None:
        """(Re)derive the rates from efficiency figures (the calibration varies them)."""
        cfg = self.cfg
        self.eff = eff
        self.mem_bw = cfg.hbm_bytes_per_s * eff["memory_bandwidth"]
        self.peak = cfg.peak_flops * eff["compute"]
        self.context_peak = cfg.peak_flops * eff.get("context_compute", eff["compute"])
        self.m_half = eff.get("gemm_half_tokens", 0.0)
        # routed experts run as one grouped GEMM, each expert's rows gathered, padded to the
        # kernel's tile and scattered back: it fills the matrix units by the rows each expert
        # gets, half of peak at `expert_half_rows` (the engine stack's kernels). A few large
        # experts (Mixtral: 8, top-2) reach a dense GEMM's efficiency at a modest batch; many
        # small ones (DeepSeek: 256, top-8) stay at a few rows each and far below it.
        self.expert_half_rows = eff.get("expert_half_rows", 64.0)
        dequant = eff.get("dequant_compute", 1.0)
        self.dense_dequant = dequant if self._dense_dequantizes else 1.0
        self.expert_dequant = dequant if self._expert_dequantizes else 1.0
        w_half = eff.get("gemm_half_width", 0.0)
        self.dense_w_eff = self.dense_width / (self.dense_width + w_half)
        self.expert_w_eff = self.expert_width / (self.expert_width + w_half)
        self.ar_latency = eff.get("allreduce_us", 10.0) / 1e6 * max(1.0, np.log2(self.ranks))
        per_layer = (eff.get("layer_overhead_us", 0.0) * self.layers
                     + eff.get("moe_layer_overhead_us", 0.0) * self.moe_layers) / 1e6
        per_row = eff.get("seq_layer_overhead_us", 0.0) * self.layers / 1e6
        # eager: the launches overlap the kernels (the step's longer of the two); otherwise
        # every overhead adds to the kernels
        self.launch_s, self.seq_launch_s = (per_layer, per_row) if self.eager else (0.0, 0.0)
        self.overhead_s = eff["step_overhead_ms"] / 1e3 + (0.0 if self.eager else per_layer)
        self.seq_overhead_s = eff.get("seq_overhead_us", 0.0) / 1e6 + (0.0 if self.eager else per_row)
        self.request_overhead_s = eff.get("request_overhead_ms", 0.0) / 1e3
        self.context_layer_s = eff.get("context_layer_ms", 0.0) * self.layers / 1e3
        self.frontend_s = eff.get("frontend_ms", 0.0) / 1e3
        self.masked_attention = eff.get("masked_attention", 1.0)

    # --- pieces -----------------------------------------------------------------------------
    def touched_experts(self, n_tokens):
        """Expected routed experts touched by n tokens, each routed to top_k of E experts."""
        e = self.experts
        if e <= 1:
            return 0.0 * n_tokens
        return e * (1.0 - (1.0 - self.top_k / e) ** np.maximum(n_tokens, 0))

    def gemm_eff(self, rows):
        if not self.m_half:
            return 1.0
        return rows / (rows + self.m_half)

    def expert_gemm_eff(self, rows):
        """The experts' grouped GEMM's efficiency at `rows` rows per expert."""
        return rows / (rows + self.expert_half_rows)

    def effective_context(self, ctx):
        return self.arch.effective_context(ctx)

    def prefill_pairs(self, start: int, count: int) -> float:
        return self.arch.prefill_pairs(start, count)

    def comm_time(self, n_tokens):
        tp, r = self.tp, self.ranks
        if r == 1:
            return 0.0 * n_tokens
        payload = n_tokens * self.hidden * ACT_BYTES
        # within one Neuron chip the ranks share the chip; between chips the link carries it
        link = 2 * (tp - 1) / tp * payload / self.link_bw if tp > 1 else 0.0
        per = self.ar_latency + link
        return np.where(np.asarray(n_tokens) > 0, self.layers * 2 * per, 0.0) + 0.0

    # --- one step ------------------------------------------------------------------------------
    def time(self, n_tok, n_logits, n_seq, kv_tok, pairs_dec, pairs_pre, admitted, ce=0.0):
        """Modelled seconds of steps described by their features (floats or arrays):
        query tokens, LM-head rows, decoding sequences, effective KV tokens read, query-key
        pairs of decoding and of prefill tokens, requests admitted, and whether the step is
        a Neuron context-encoding pass."""
        peak = self.peak if not self.neuron else np.where(ce, self.context_peak, self.peak)
        t_dense = np.maximum(self.dense_bytes / self.mem_bw,
                             (2 * self.dense_params * n_tok + 2 * self.head_params * n_logits)
                             / (peak * self.dense_w_eff * self.dense_dequant
                                * self.gemm_eff(np.maximum(n_tok, 1))))
        t = t_dense
        if self.moe_layers:
            touched = self.touched_experts(n_tok)
            rows = n_tok * self.top_k / np.maximum(touched, 1e-9)
            routed = self.top_k * n_tok
            if self.neuron:
                # NxD's expert MLPs under static shapes: a context-encoding pass runs every
                # expert over every token; a token-generation step whose (padded) tokens route
                # at least as many expert slots as there are experts does too
                # (forward_all_experts), and below that each token loads its own top-k
                # experts, none shared between tokens (forward_selective_loading)
                slots = n_tok * self.top_k
                every = np.logical_or(ce, slots >= self.experts)
                touched = np.where(every, float(self.experts), slots)
                rows = np.where(every, n_tok, 1.0)
                routed = np.where(every, self.experts * n_tok, slots)
            t_exp = self.moe_layers * np.maximum(
                touched * self.expert_bytes / self.mem_bw,
                2 * self.expert_params * routed
                / (peak * self.expert_w_eff * self.expert_dequant
                   * self.expert_gemm_eff(np.maximum(rows, 1))))
            t = t + t_exp
        if self.masked_batch:
            # the step's new keys are in the batch too
            keys = kv_tok + n_tok
            t_attn = np.maximum(keys * self.kv_group_bytes * self.kv_moves / self.mem_bw,
                                n_tok * keys * self.pair_flops_prefill
                                / (peak * self.masked_attention))
        else:
            t_attn = np.maximum(kv_tok * self.kv_group_bytes / self.mem_bw,
                                (pairs_dec * self.pair_flops_decode
                                 + pairs_pre * self.pair_flops_prefill) / peak)
        t = t + t_attn + self.comm_time(n_tok)
        if self.eager:
            t = np.maximum(t, self.launch_s + self.seq_launch_s * n_seq)
        t = t + self.overhead_s + self.seq_overhead_s * n_seq + self.request_overhead_s * admitted
        if self.neuron:
            t = t + ce * self.context_layer_s
        return t

    def step_time(self, prefill: int, decode: int, kv_tokens_read: float = 0.0,
                  attn_pairs: float = 0.0, admitted: int = 0) -> float:
        """One step of `prefill` prompt tokens and `decode` decoding sequences (the earlier
        signature: `attn_pairs` counted as decode pairs, one LM-head row per decode)."""
        n = prefill + decode
        if n == 0:
            return 0.0
        return float(self.time(n, decode + (1 if prefill else 0), decode, kv_tokens_read,
                               attn_pairs, 0.0, admitted))

    def decode_step(self, batch: int, context: int) -> float:
        """A pure decode step: `batch` sequences, each with `context` tokens of KV."""
        eff_ctx = float(self.effective_context(context))
        return float(self.time(batch, batch, batch, batch * eff_ctx, batch * eff_ctx, 0.0, 0))

    def prefill_time(self, prompt_tokens: int, budget: int = 8192) -> float:
        """TTFT of a lone request: its prompt in chunks of `budget` tokens, back to back."""
        t, done = 0.0, 0
        while done < prompt_tokens:
            c = min(budget, prompt_tokens - done)
            last = done + c == prompt_tokens
            t += float(self.time(c, 1 if last else 0, 0, done, 0.0, self.prefill_pairs(done, c),
                                 int(done == 0)))
            done += c
        return t

    # --- cold start ----------------------------------------------------------------------------
    def cold_start_phases(self) -> list[tuple[str, float]]:
        """Modelled seconds per deploy sub-phase: weights_load, compile (Neuron), ready."""
        cs = self.cfg.cold_start
        phases = [("weights_load", self.cfg.weights_bytes / (cs["weights_load_gbps"] * GB))]
        if self.neuron:
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
        if self.neuron:
            phases += [("compile", cs["neuron_compile_s"]), ("graph_capture", cs["neuron_ready_s"])]
        else:
            phases.append(("graph_capture", cs["graph_capture_s"]))
        return phases

    def kv_capacity_tokens(self, kv_capacity_gb: float) -> int:
        """Tokens the KV cache holds in `kv_capacity_gb` of the TP group's memory (each
        token's KV counted as often as the group copies it)."""
        return max(0, int(kv_capacity_gb * GB // self.kv_group_bytes))
