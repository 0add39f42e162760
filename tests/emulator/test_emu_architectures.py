"""The architectures the emulator serves, derived from their published shapes: the parameter
counts the derivation gives agree with the model cards, and the per-token figures follow
from the shapes (hand-computed)."""

from __future__ import annotations

import pytest
from servingbench.emulator import specs
from servingbench.emulator.specdata import load


@pytest.mark.parametrize("key", specs.models())
def test_derived_totals_match_the_model_card(key):
    a = specs.model(key)
    # the card's total includes a vision encoder for Llama 4 (~1 B), nothing else differs
    assert a.total_params_b == pytest.approx(a.published_total_b, rel=0.015)
    # cards count the active parameters with the embedding a token looks up (Llama, Qwen,
    # DeepSeek) or without it (gpt-oss): one of the two agrees
    embedding_b = a.head_params / 1e9 if not a.tie_word_embeddings else 0.0
    off = min(abs(a.active_params_b / a.published_active_b - 1),
              abs((a.active_params_b + embedding_b) / a.published_active_b - 1))
    assert off <= 0.02, (key, a.active_params_b, a.published_active_b)


@pytest.mark.parametrize("key", specs.models())
def test_every_architecture_names_its_source(key):
    d = load("architectures.yaml")[key]
    assert d["source"].startswith("https://"), key


def test_grouped_query_kv_bytes_by_hand():
    a = specs.model("Llama-3.1-8B")
    # 32 layers x (K and V) x 8 KV heads x 128 values x 2 bytes
    assert a.kv_bytes_per_token(2.0) == 32 * 2 * 8 * 128 * 2
    assert a.kv_replication(8) == 1.0 and a.kv_replication(16) == 2.0


def test_latent_attention_keeps_the_latent_and_copies_it_to_every_rank():
    a = specs.model("DeepSeek-R1")
    assert a.attention_kind == "mla"
    # 61 layers x (kv_lora_rank 512 + rope 64) x 1 byte in FP8
    assert a.kv_bytes_per_token(1.0) == 61 * 576
    assert a.kv_replication(8) == 8.0
    # a decoding query works on the latent: 2·128·576 + 2·128·512 FLOPs a pair and layer
    assert a.decode_pair_flops == 2 * 128 * 576 + 2 * 128 * 512


def test_experts_layers_and_routing():
    maverick = specs.model("meta-llama/Llama-4-Maverick-17B-128E-Instruct")
    assert maverick.moe_layers == 24 and maverick.top_k == 1 and maverick.routed_experts == 128
    deepseek = specs.model("DeepSeek-V3")
    assert deepseek.moe_layers == 58 and deepseek.top_k == 8 and deepseek.shared_experts == 1
    assert specs.model("Mixtral-8x7B").moe_layers == 32
    assert not specs.model("Llama-3.3-70B").is_moe


def test_gpt_oss_checkpoint_keeps_all_but_its_experts_in_bf16():
    a = specs.model("gpt-oss-120b")
    native = specs.precision("mxfp4")
    dense_b, expert_b = a.part_bytes(native.bytes_per_param, native.name)
    assert dense_b == 2.0 and expert_b == native.bytes_per_param
    # the same weights dequantized to bf16 (as Neuron loads them) are bf16 throughout
    assert a.part_bytes(2.0, "bf16") == (2.0, 2.0)
    # 114.7 B expert parameters at 0.53 B + 2.1 B others at 2 B: the card's ~65 GB
    assert a.weight_bytes(native) / 1e9 == pytest.approx(65.2, rel=0.01)


def test_local_attention_caps_the_keys_a_layer_reads():
    scout = specs.model("scout")
    # 3 of 4 layers read at most 8192 keys
    assert scout.effective_context(4096) == 4096
    assert scout.effective_context(32768) == pytest.approx(0.25 * 32768 + 0.75 * 8192)
    # the prefill pair count is the sum of the per-position reads
    assert scout.prefill_pairs(0, 3) == pytest.approx(0 + 1 + 2)


def test_names_resolve_case_insensitively_and_unknown_names_raise():
    assert specs.model_key("llama-3.3-70b") == "llama-3.1-70b"
    assert specs.model_key("openai/gpt-oss-20b") == "gpt-oss-20b"
    assert specs.model_key("no-such-model") is None
    with pytest.raises(specs.SpecError, match="unknown model"):
        specs.model("no-such-model")


def test_every_datacenter_accelerator_has_its_power_figures():
    # the emulated DCGM series fall back to a generic 50-500 W for a name they do not know;
    # a renamed accelerator must not fall back silently
    import yaml
    from servingbench.emulator.dcgm import POWER_W
    from servingbench.emulator.specdata import HERE

    names = yaml.safe_load((HERE / "hardware.yaml").read_text())["accelerators"]
    missing = [n for n in names if not n.startswith("cpu-") and n not in POWER_W]
    assert missing == []


def test_neuron_moe_token_generation_loads_selected_experts_until_all_run():
    """NxD's expert MLPs in the token-generation graph: below one routed slot per expert each
    row loads its own top-k experts, none shared with another row (selective loading); from
    there every expert runs over every row (forward_all_experts), so one more row reads no
    more expert weights."""
    from servingbench.emulator import specs
    from servingbench.emulator.perf import PerfModel
    m = PerfModel(specs.config("trn2.48xlarge", "Qwen3-30B-A3B", "bf16", 1, "optimum-neuron"))
    assert m.experts == 128 and m.top_k == 8  # 16 rows route 128 slots

    def step(rows):
        return float(m.time(rows, rows, rows, 0.0, 0.0, 0.0, 0))
    expert_s = m.moe_layers * m.expert_bytes / m.mem_bw  # one expert of every MoE layer
    below = step(15) - step(14)
    assert below >= 0.99 * m.top_k * expert_s
    assert step(17) - step(16) < below / 2
