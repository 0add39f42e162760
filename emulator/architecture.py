"""A model architecture from its published shapes (architectures.yaml), and what follows
from them: parameters per part, bytes and FLOPs per token, KV bytes per token.

Counts are parameters (not billions) unless a name says `_b`. A SwiGLU feed-forward block
of intermediate size I has 3 · hidden · I parameters (gate, up, down). The LM head is a
vocab × hidden matrix read on every step; the embedding is looked up, not multiplied, so it
costs memory but neither bandwidth nor FLOPs.

Grouped-query attention keeps 2 · kv_heads · head_dim values per token and layer; DeepSeek's
latent attention (MLA) keeps kv_lora_rank + qk_rope_head_dim. One query-key pair costs 4 ·
heads · head_dim FLOPs under GQA (QKᵀ and PV); under MLA a decoding query works on the
latent directly (absorbed weights: 2 · heads · (kv_lora + rope) + 2 · heads · kv_lora) while
a prefill expands it (2 · heads · (nope + rope) + 2 · heads · v_head), as vLLM and SGLang do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from servingbench.emulator.specdata import SpecError

BF16_BYTES = 2.0


@dataclass(frozen=True)
class Architecture:
    name: str
    hf_id: str
    native_precision: str
    layers: int
    hidden_size: int
    vocab_size: int
    tie_word_embeddings: bool
    max_context: int
    attention_kind: str  # gqa | mla
    attention_heads: int
    kv_heads: int  # MLA: the latent is one "head" shared by all query heads
    head_dim: int
    window: int  # keys a local-attention layer reads at most (0: none)
    window_layers: float  # fraction of layers with local attention
    mla: tuple[int, int, int, int, int]  # q_lora, kv_lora, qk_nope, qk_rope, v_head (MLA only)
    ffn_intermediate: int
    routed_experts: int  # 1 for a dense model
    top_k: int
    shared_experts: int
    expert_intermediate: int
    moe_every: int
    first_dense: int
    quantized_part: str  # all | experts: what a native low-precision checkpoint quantizes
    published_total_b: float
    published_active_b: float
    checkpoint_kv: tuple[tuple[str, str], ...] = ()  # weight precision -> its checkpoint's KV format

    @classmethod
    def of(cls, key: str, d: dict[str, Any]) -> Architecture:
        try:
            att, moe, ffn = d["attention"], d.get("moe") or {}, d.get("ffn") or {}
            mla = att.get("kind") == "mla"
            return cls(
                key, d["hf_id"], d["native_precision"], int(d["layers"]), int(d["hidden_size"]),
                int(d["vocab_size"]), bool(d["tie_word_embeddings"]), int(d["max_context"]),
                att["kind"], int(att["heads"]), 1 if mla else int(att["kv_heads"]),
                int(att.get("head_dim") or 0), int(att.get("window") or 0),
                float(att.get("window_layers") or 0.0),
                tuple(int(att[k]) for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                                            "qk_rope_head_dim", "v_head_dim")) if mla else (0,) * 5,
                int(ffn.get("intermediate_size") or 0), int(moe.get("experts") or 1),
                int(moe.get("top_k") or 1), int(moe.get("shared_experts") or 0),
                int(moe.get("intermediate_size") or 0), int(moe.get("every") or 1),
                int(moe.get("first_dense") or 0), moe.get("quantized", "all"),
                float(d["published_params_b"]["total"]), float(d["published_params_b"]["active"]),
                tuple((d.get("checkpoint_kv") or {}).items()))
        except (KeyError, TypeError, ValueError) as exc:
            raise SpecError(f"architectures.yaml {key}: {exc!r}") from None

    # --- parts (parameters) --------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.routed_experts > 1

    @property
    def moe_layers(self) -> int:
        return (self.layers - self.first_dense) // self.moe_every if self.is_moe else 0

    @property
    def attention_params(self) -> int:
        """One layer's attention projections."""
        h = self.hidden_size
        if self.attention_kind == "mla":
            q_lora, kv_lora, nope, rope, v = self.mla
            n = self.attention_heads
            q = h * q_lora + q_lora * n * (nope + rope) if q_lora else h * n * (nope + rope)
            return q + h * (kv_lora + rope) + kv_lora * n * (nope + v) + n * v * h
        q = self.attention_heads * self.head_dim
        return 2 * h * q + 2 * h * self.kv_heads * self.head_dim

    @property
    def expert_params(self) -> int:
        """One routed expert of one MoE layer."""
        return 3 * self.hidden_size * self.expert_intermediate

    @property
    def dense_linear_params(self) -> int:
        """Weights every step reads whatever the routing: attention, dense feed-forward
        layers, shared experts and routers."""
        dense_layers = self.layers - self.moe_layers
        per_moe = self.shared_experts * self.expert_params + self.hidden_size * self.routed_experts
        return (self.layers * self.attention_params
                + dense_layers * 3 * self.hidden_size * self.ffn_intermediate
                + self.moe_layers * per_moe)

    @property
    def routed_params(self) -> int:
        return self.moe_layers * self.routed_experts * self.expert_params if self.is_moe else 0

    @property
    def head_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def total_params(self) -> int:
        embed = 0 if self.tie_word_embeddings else self.head_params
        return self.dense_linear_params + self.routed_params + self.head_params + embed

    @property
    def active_params(self) -> int:
        """Parameters one token's forward pass multiplies (the LM head included)."""
        routed = self.moe_layers * self.top_k * self.expert_params if self.is_moe else 0
        return self.dense_linear_params + routed + self.head_params

    @property
    def total_params_b(self) -> float:
        return self.total_params / 1e9

    @property
    def active_params_b(self) -> float:
        return self.active_params / 1e9

    # --- bytes ----------------------------------------------------------------------------
    def part_bytes(self, bytes_per_param: float, precision_name: str) -> tuple[float, float]:
        """Bytes per parameter of the dense part and of the routed experts. A checkpoint
        quantized only in its experts (gpt-oss's MXFP4) keeps the rest in bf16."""
        if self.quantized_part == "experts" and precision_name == self.native_precision:
            return BF16_BYTES, bytes_per_param
        return bytes_per_param, bytes_per_param

    def weight_bytes(self, precision) -> float:
        """Bytes of the weights held in accelerator memory. The LM head and the embedding
        stay in bf16 under FP8/FP4 quantization (as vLLM and ModelOpt checkpoints keep them)."""
        dense_b, expert_b = self.part_bytes(precision.bytes_per_param, precision.name)
        head_b = precision.head_bytes
        embed = 0 if self.tie_word_embeddings else self.head_params
        return (self.dense_linear_params * dense_b + self.routed_params * expert_b
                + (self.head_params + embed) * head_b)

    def kv_values_per_token_layer(self) -> int:
        if self.attention_kind == "mla":
            return self.mla[1] + self.mla[3]
        return 2 * self.kv_heads * self.head_dim

    def kv_bytes_per_token(self, bytes_per_value: float = 2.0) -> float:
        """K and V (or the MLA latent) of every layer for one token."""
        return self.layers * self.kv_values_per_token_layer() * bytes_per_value

    def kv_replication(self, tp: int) -> float:
        """How many copies of each token's KV a TP group holds: GQA shards the KV heads and
        copies them once tp exceeds them; MLA's latent is copied to every rank."""
        if self.attention_kind == "mla":
            return float(tp)
        return max(1.0, tp / self.kv_heads)

    # --- attention -------------------------------------------------------------------------
    @property
    def decode_pair_flops(self) -> float:
        """FLOPs of one query-key pair of a decoding token, one layer."""
        n = self.attention_heads
        if self.attention_kind == "mla":
            kv_lora, rope = self.mla[1], self.mla[3]
            return 2 * n * (kv_lora + rope) + 2 * n * kv_lora
        return 4 * n * self.head_dim

    @property
    def prefill_pair_flops(self) -> float:
        n = self.attention_heads
        if self.attention_kind == "mla":
            _, _, nope, rope, v = self.mla
            return 2 * n * (nope + rope) + 2 * n * v
        return 4 * n * self.head_dim

    def effective_context(self, ctx):
        """Keys one query reads per layer, averaged over global and local layers (floats or
        numpy arrays)."""
        if not self.window:
            return ctx
        local = np.minimum(ctx, self.window)
        return (1 - self.window_layers) * ctx + self.window_layers * local

    def prefill_pairs(self, start: int, count: int) -> float:
        """Σ over query positions p in [start, start+count) of effective_context(p)."""
        end = start + count
        full = (start + end - 1) * count / 2.0
        if not self.window:
            return full
        w = self.window
        lo, hi = min(start, w), min(end, w)
        local = (lo + hi - 1) * (hi - lo) / 2.0 if hi > lo else 0.0
        local += max(0, end - max(start, w)) * w
        return (1 - self.window_layers) * full + self.window_layers * local

    # --- the earlier spec's names, still read by the fit check and the device model --------
    @property
    def expert_params_b(self) -> float:
        return self.moe_layers * self.expert_params / 1e9 if self.is_moe else 0.0

    @property
    def dense_params_b(self) -> float:
        return self.active_params_b - self.moe_layers * self.top_k * self.expert_params / 1e9
