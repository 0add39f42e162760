"""Fit check: every candidate × model × precision of the seeds' table."""

from __future__ import annotations

import pytest
from servingbench.emulator import specs
from servingbench.emulator.fit import fit_check

# Expected answers from the arithmetic: capacity = n × GB/accelerator × 0.90;
# needs weights (Scout's 107.8 B or Maverick's 400.7 B params, derived from their shapes, × 2 /
# 1 / 0.5 bytes; the LM head and embedding stay bf16) + 2 GB/accelerator + 1.6 GB KV.
EXPECTED = {
    ("p5.48xlarge", "scout"): (True, True, True),      # 576 GB usable
    ("p5.48xlarge", "maverick"): (False, True, True),  # 800 GB BF16 > 576
    ("p4d.24xlarge", "scout"): (True, True, True),     # 288 GB usable, 218 + 16 + 1.6
    ("p4d.24xlarge", "maverick"): (False, False, True),
    ("g6e.48xlarge", "scout"): (True, True, True),     # 345.6 GB usable
    ("g6e.48xlarge", "maverick"): (False, False, True),
    ("trn2.48xlarge", "scout"): (True, True, True),    # 1382.4 GB usable
    ("trn2.48xlarge", "maverick"): (True, True, True),
    ("inf2.48xlarge", "scout"): (True, True, True),    # 345.6 GB usable
    ("inf2.48xlarge", "maverick"): (False, False, True),
}


@pytest.mark.parametrize(("candidate", "model"), sorted(EXPECTED))
def test_fit_table(candidate, model):
    got = tuple(fit_check(candidate, model, p).fits for p in ("bf16", "fp8", "int4"))
    assert got == EXPECTED[(candidate, model)]


def test_maverick_bf16_on_p5_message_shows_the_arithmetic():
    r = fit_check("p5.48xlarge", "maverick", "bf16")
    assert not r.fits
    assert r.weights_gb == pytest.approx(801.4, abs=0.1)  # the card's 400 B × 2 bytes, derived
    assert r.capacity_gb == pytest.approx(576.0)
    assert "801.4 GB" in r.message and "576.0 GB" in r.message and "DOES NOT FIT" in r.message


def test_scout_bf16_weights_match_seeds_estimate():
    r = fit_check("p5.48xlarge", "scout", "bf16")
    # the seeds' 109 B × 2 bytes = 218 GB; the shapes give 107.8 B (the card counts the vision
    # encoder the emulator does not serve)
    assert r.weights_gb == pytest.approx(218.0, rel=0.015)
    assert r.kv_min_gb == pytest.approx(8192 * 48 * 2 * 8 * 128 * 2 / 1e9)


def test_smaller_tp_can_stop_a_fit():
    assert fit_check("p5.48xlarge", "scout", "bf16", tp=8).fits
    assert not fit_check("p5.48xlarge", "scout", "bf16", tp=2).fits  # 144 GB < 218 GB


def test_h200_entry_exists_and_one_h200_holds_scout_fp8_not_bf16():
    assert "p5en.48xlarge" in specs.candidates()
    assert fit_check("p5en.48xlarge", "scout", "fp8", tp=1).fits  # 109 + 2 + 1.6 < 126.9 GB
    assert not fit_check("p5en.48xlarge", "scout", "bf16", tp=1).fits  # 218 GB > 126.9 GB


def test_impossible_tp_and_unknown_names_raise():
    with pytest.raises(specs.SpecError, match="accelerators"):
        fit_check("p5.48xlarge", "scout", "bf16", tp=9)
    with pytest.raises(specs.SpecError, match="unknown candidate"):
        fit_check("p6.48xlarge", "scout", "bf16")
    with pytest.raises(specs.SpecError, match="unknown precision"):
        fit_check("p5.48xlarge", "scout", "fp6")


def test_every_spec_number_has_a_source():
    from servingbench.emulator.specdata import load
    hardware = load("hardware.yaml")
    for section, table in (("accelerators", hardware["accelerators"]),
                           ("instances", hardware["instances"]),
                           ("models", load("architectures.yaml")),
                           ("profiles", load("engines.yaml")["profiles"])):
        for name, entry in table.items():
            sources = [entry.get("source")] if section != "profiles" else \
                [v.get("source") for k, v in entry.items() if k != "aliases"]
            assert sources and all(sources), f"{section}.{name} has no source"
    raw = specs.raw()
    for name, entry in raw["precisions"].items():
        assert entry.get("source"), name
    text = specs.SPEC_PATH.read_text()
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or not stripped or stripped.endswith(":"):
            continue
        if "source" in stripped or stripped.startswith("hf_id"):
            continue
        assert "#" in stripped, f"number without a source comment: {stripped}"


def test_tensorrt_llm_sizes_its_kv_cache_from_what_the_weights_leave():
    # 70B at FP8 on one 80 GB H100: vLLM's 0.9 of the whole memory leaves no room for the
    # KV cache; TensorRT-LLM loads the weights first and gives the KV cache 0.9 of the rest
    # (NVIDIA publishes this configuration's throughput)
    vllm = fit_check("p5.48xlarge", "llama-3.1-70b", "fp8", 1, kv_bytes_per_value=1.0, engine="vllm")
    trt = fit_check("p5.48xlarge", "llama-3.1-70b", "fp8", 1, kv_bytes_per_value=1.0,
                    engine="tensorrt-llm")
    assert not vllm.fits and trt.fits
    left = trt.capacity_gb - trt.weights_gb - trt.overhead_gb
    assert trt.capacity_gb == pytest.approx(80.0)
    assert trt.kv_capacity_gb == pytest.approx(0.9 * left)
    assert "0.9 of what is left" in trt.message
