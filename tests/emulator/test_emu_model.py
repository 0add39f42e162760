"""Monotone sanity of the performance model and the scheduler (model functions directly)."""

from __future__ import annotations

import pytest
from servingbench.emulator import specs
from servingbench.emulator.perf import PerfModel
from servingbench.emulator.scheduler import Scheduler, Seq, simulate

CANDIDATES = ["p5.48xlarge", "p4d.24xlarge", "g6e.48xlarge", "trn2.48xlarge", "inf2.48xlarge"]


def perf(candidate="p5.48xlarge", model="scout", precision="bf16", tp=None) -> PerfModel:
    return PerfModel(specs.config(candidate, model, precision, tp))


def test_touched_experts_formula():
    m = perf(model="maverick")
    assert m.touched_experts(1) == pytest.approx(1.0)
    assert m.touched_experts(0) == 0.0
    assert m.touched_experts(128) == pytest.approx(128 * (1 - (1 - 1 / 128) ** 128))
    assert m.touched_experts(10_000) == pytest.approx(128, rel=1e-6)
    s = perf(model="scout")
    assert s.touched_experts(2) == pytest.approx(16 * (1 - (15 / 16) ** 2))  # 1.9375


def test_expert_split_matches_the_model_card():
    s = specs.model("scout")
    # the card's 109 B and 17 B count the vision encoder and the embedding the text model
    # looks up; the shapes give the rest
    assert s.dense_params_b + 16 * s.expert_params_b + s.head_params / 1e9 == \
        pytest.approx(109, rel=0.015)
    assert s.dense_params_b + s.expert_params_b + s.head_params / 1e9 == pytest.approx(17, rel=0.02)


@pytest.mark.parametrize("candidate", CANDIDATES)
def test_longer_prompts_take_longer_to_first_token(candidate):
    m = perf(candidate)
    times = [m.prefill_time(p) for p in (128, 512, 2048, 8192, 32768)]
    assert times == sorted(times) and len(set(times)) == len(times)


@pytest.mark.parametrize("candidate", CANDIDATES)
def test_decode_step_grows_with_batch_but_per_token_cost_falls(candidate):
    m = perf(candidate)
    steps = [m.decode_step(b, 1024) for b in (1, 2, 8, 32, 128, 256)]
    assert steps == sorted(steps)
    per_token = [t / b for t, b in zip(steps, (1, 2, 8, 32, 128, 256), strict=True)]
    assert per_token == sorted(per_token, reverse=True)


def test_prefill_is_compute_bound_and_small_decode_memory_bound():
    m = perf()
    # decode of one token: the weights read dominate; doubling peak FLOP/s changes nothing
    t1 = m.decode_step(1, 512)
    m.peak *= 2
    assert m.decode_step(1, 512) == pytest.approx(t1)
    # a long prefill: compute dominates; doubling bandwidth changes nothing
    p = m.prefill_time(8192)
    m.mem_bw *= 2
    assert m.prefill_time(8192) == pytest.approx(p)


def test_weights_the_matrix_units_do_not_run_are_dequantized_at_a_share_of_the_rate():
    """gpt-oss's MXFP4 experts on an H100 (no FP4 unit) are dequantized inside the grouped
    GEMM: its compute-bound time grows as the dequantizing share falls, while its bf16 dense
    part, an FP8 model on the same chip (a format it runs) and a bf16 model are untouched."""
    def prefill_at(m, share, n=8192):
        m.set_efficiency({**m.eff, "dequant_compute": share})
        return m.prefill_time(n)

    oss = perf(model="gpt-oss-120b", precision="mxfp4", tp=1)
    assert (oss.dense_dequant, oss.expert_dequant) == (1.0, oss.eff.get("dequant_compute", 1.0))
    full, half = prefill_at(oss, 1.0), prefill_at(oss, 0.5)
    assert half > 1.3 * full
    assert (oss.dense_dequant, oss.expert_dequant) == (1.0, 0.5)
    for native in (perf(precision="fp8"), perf(precision="bf16")):
        assert prefill_at(native, 0.5) == pytest.approx(prefill_at(native, 1.0))


def test_the_calibration_finds_dequantizing_gemms_short_of_the_16_bit_rate():
    """The shares fitted per tensor-core generation (calibration.yaml) lie strictly between
    none and all, and a Hopper's is the lower: its 16-bit GEMMs run on warpgroup MMAs that a
    GEMM converting its weights on the way keeps fed at less than their rate (Marlin does not
    issue them at all), where an Ampere's run on the warp-level MMAs Marlin issues as well.
    Only the generations with dequantizing rows in the table are fitted."""
    from servingbench.emulator.engines import calibration

    shares = {gen: f["dequant_compute"] for gen, f in calibration()["tensor_cores"].items()}
    assert set(shares) == {"hopper", "ampere"}  # MXFP4 on H100/H200 and on A100
    assert all(0.1 < share < 1.0 for share in shares.values()), shares
    assert shares["hopper"] < shares["ampere"], shares


def test_a_dequantizing_gemm_takes_its_tensor_cores_share():
    """The share is the accelerator's generation's: both Hoppers take one figure, an Ampere
    another; a GEMM in a format the chip runs takes none; a calibration written before the
    share was fitted per generation still gives its platform-wide one."""
    from servingbench.emulator.engines import efficiency_of

    cal = {"platforms": {"cuda": {"dequant_compute": 0.5}},
           "tensor_cores": {"hopper": {"dequant_compute": 0.4}, "ampere": {"dequant_compute": 0.6}}}
    old = {"platforms": {"cuda": {"dequant_compute": 0.5}}}
    h100, h200, a100 = (specs.accelerator(a) for a in ("H100", "H200", "A100"))
    assert [h.tensor_cores for h in (h100, h200, a100)] == ["hopper", "hopper", "ampere"]
    assert [efficiency_of("vllm", a, cal)["dequant_compute"] for a in (h100, h200, a100)] == \
        [0.4, 0.4, 0.6]
    assert efficiency_of("vllm", a100, old)["dequant_compute"] == 0.5
    on = {"p5.48xlarge": 0.4, "p4d.24xlarge": 0.6}
    for candidate, share in on.items():
        m = PerfModel(specs.config(candidate, "gpt-oss-120b", "mxfp4", None))
        m.set_efficiency(efficiency_of("vllm", m.cfg.instance.accelerator, cal))
        assert m.dequantizes and (m.dense_dequant, m.expert_dequant) == (1.0, share)
        native = PerfModel(specs.config(candidate, "llama-3.1-8b", "bf16", None))
        assert not native.dequantizes


def test_tp_communication_term():
    m = perf()
    assert m.comm_time(0) == 0.0
    assert m.comm_time(256) > m.comm_time(1) > 0
    assert perf(tp=1).comm_time(256) == 0.0
    slow_link = perf("g6e.48xlarge")
    assert slow_link.comm_time(256) > m.comm_time(256)  # PCIe vs NVLink


# How much 64 concurrent requests gain over one. On Neuron, Scout's decode at one row loads
# only that row's expert (NxD's selective loading), but from one slot per expert on every
# expert runs over every row, so the padded batch of 64 pays sixteen experts' work per
# row and the gain is smaller than on a GPU, where each row runs only its own expert.
BATCH_GAIN = {"inf2.48xlarge": 3, "trn2.48xlarge": 4}


@pytest.mark.parametrize("candidate", CANDIDATES)
def test_more_concurrency_more_throughput_and_itl_until_saturation(candidate):
    m = perf(candidate)
    curves = [simulate(m, c, 512, 64, max_num_seqs=64) for c in (1, 4, 16, 64)]
    thr = [c.throughput_tok_s for c in curves]
    itl = [c.itl_s for c in curves]
    assert thr == sorted(thr) and thr[-1] > BATCH_GAIN.get(candidate, 8) * thr[0]
    assert itl == sorted(itl)
    # past max_num_seqs the engine saturates: throughput stops growing, TTFT (queueing) grows
    over = simulate(m, 128, 512, 64, max_num_seqs=64)
    assert over.throughput_tok_s == pytest.approx(thr[-1], rel=0.1)
    assert over.ttft_s > curves[-1].ttft_s


def test_scheduler_respects_max_num_seqs_and_token_budget():
    m = perf()
    s = Scheduler(m, max_num_seqs=2, token_budget=1000, kv_tokens=10**6)
    seqs = [Seq(600, 3) for _ in range(3)]
    for q in seqs:
        s.add(q)
    step = s.step()
    # budget 1000: the first prompt whole (600), then 400 of the second
    assert seqs[0].computed == 600 and seqs[1].computed == 400 and seqs[2].computed == 0
    assert step.emitted == [seqs[0]]
    s.step()
    assert len(s.running) == 2 and list(s.waiting) == [seqs[2]]  # max_num_seqs holds the third


def test_scheduler_waits_when_kv_cache_is_full():
    m = perf()
    s = Scheduler(m, max_num_seqs=256, token_budget=8192, kv_tokens=1000)
    a, b = Seq(500, 400), Seq(500, 400)  # 900 KV tokens each
    s.add(a)
    s.add(b)
    s.step()
    assert s.running == [a] and list(s.waiting) == [b]
    while a in s.running:
        s.step()
    s.step()
    assert b in s.running
    with pytest.raises(ValueError, match="KV"):
        s.add(Seq(900, 200))


def test_cold_start_phases():
    gpu = perf().cold_start_phases()
    assert [n for n, _ in gpu] == ["weights_load", "ready"]
    assert gpu[0][1] == pytest.approx(perf().cfg.weights_bytes / 2e9)  # the weights at 2 GB/s
    neuron = perf("trn2.48xlarge").cold_start_phases()
    assert [n for n, _ in neuron] == ["weights_load", "compile", "ready"]


def test_replica_phases_pull_load_compile_capture_scaled_by_model_size():
    gpu = perf().replica_phases()
    assert [n for n, _ in gpu] == ["image_pull", "weights_load", "graph_capture"]
    assert gpu[1][1] == pytest.approx(perf().cfg.weights_bytes / 2e9)  # the weights at 2 GB/s
    neuron = perf("trn2.48xlarge").replica_phases()
    assert [n for n, _ in neuron] == ["image_pull", "weights_load", "compile", "graph_capture"]
