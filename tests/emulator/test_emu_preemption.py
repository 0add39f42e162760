"""The scheduler's KV cache as vLLM V1 allocates it (`block`): whole blocks as a sequence
grows, the newest running sequence preempted and recomputed when one needs a block and
none is free; beside the default, which reserves prompt + output and never preempts. Real
vLLM does the same on its CPU build (tests/engine/test_vllm_live.py)."""

from __future__ import annotations

from servingbench.emulator import specs
from servingbench.emulator.perf import PerfModel
from servingbench.emulator.scheduler import Scheduler, Seq

BLOCK = 16


def _run(sched: Scheduler, seqs: list[Seq]) -> dict[Seq, list[int]]:
    """Every step's emitted tokens per sequence, until the scheduler idles."""
    for s in seqs:
        sched.add(s)
    emitted: dict[Seq, list[int]] = {s: [] for s in seqs}
    steps = 0
    while (step := sched.step()) is not None:
        steps += 1
        for s in step.emitted:
            emitted[s].append(steps)
        assert sched.kv_used <= sched.kv_capacity
        if sched.block:
            held = sum(s.blocks for s in sched.running)
            assert held + sched.free_blocks == sched.kv_capacity // sched.block
    return emitted


def _model() -> PerfModel:
    return PerfModel(specs.config("p5.48xlarge", "scout", "bf16"))


def test_blocks_admit_both_and_preempt_when_the_cache_runs_out():
    # 8 blocks of 16: each sequence needs 2 blocks for its prompt and 5 by its end
    sched = Scheduler(_model(), max_num_seqs=8, token_budget=8192, kv_tokens=8 * BLOCK,
                      reserve_output=0.0, block=BLOCK)
    a, b = Seq(prompt=20, output=60), Seq(prompt=20, output=60)
    emitted = _run(sched, [a, b])
    assert sched.preemptions >= 1
    # every token came out exactly once: the preempted one was recomputed, then went on
    assert len(emitted[a]) == len(emitted[b]) == 60
    assert a.generated == b.generated == 60
    # both started together (admitted on their prompts' blocks), unlike the reservation
    assert emitted[a][0] == emitted[b][0] == 1
    assert sched.free_blocks == 8 and sched.kv_used == 0 and not sched.running


def test_the_reservation_queues_instead_and_never_preempts():
    sched = Scheduler(_model(), max_num_seqs=8, token_budget=8192, kv_tokens=8 * BLOCK)
    a, b = Seq(prompt=20, output=60), Seq(prompt=20, output=60)
    emitted = _run(sched, [a, b])
    assert sched.preemptions == 0
    assert emitted[b][0] > emitted[a][-1]  # b waited for all of a's reservation


def test_a_recomputed_sequence_prefills_its_prompt_and_its_tokens_again():
    sched = Scheduler(_model(), max_num_seqs=8, token_budget=8192, kv_tokens=6 * BLOCK,
                      reserve_output=0.0, block=BLOCK)
    a, b = Seq(prompt=30, output=50), Seq(prompt=30, output=50)
    for s in (a, b):
        sched.add(s)
    while sched.preemptions == 0:
        assert sched.step() is not None
    victim = sched.waiting[0]
    assert victim is b and victim.computed == 0 and victim.blocks == 0
    assert victim.target == victim.prompt + victim.generated > victim.prompt


def test_the_fitted_vllm_spec_allocates_blocks_of_128():
    prof = specs.fitted_config("vllm-cpu-tiny-llama-this-host").profile()
    assert prof.kv_reserve_output == 0 and prof.block_tokens == 128  # vLLM's CPU build
    # vLLM on a GPU allocates blocks of 16 the same way; TensorRT-LLM reserves and never preempts
    gpu = specs.config("p5.48xlarge", "scout", "bf16").profile()
    assert gpu.kv_reserve_output == 0 and gpu.block_tokens == 16
    assert specs.config("p5.48xlarge", "scout", "bf16", engine="tensorrt-llm").profile() \
        .kv_reserve_output == 1


def test_the_emulator_serves_vllms_preemption_and_prefix_cache_counters():
    """The fitted vLLM spec's emulator, its KV cache cut to 17 blocks of 128 (as the
    benchmark's preemption point): four long requests preempt, a shared prompt hits in
    whole 128-token blocks, and /metrics says both in vLLM's names."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx
    from servingbench.emulator.process import EmulatorProcess
    from servingbench.resources.http.prometheus import parse

    def total(text, name):
        return sum(v for _, v in parse(text)[name])

    with EmulatorProcess(["--spec", "vllm-cpu-tiny-llama-this-host", "--time-scale", "0.05",
                          "--cold-start-s", "0", "--kv-cache-tokens", str(17 * 128)]) as emu:
        model = httpx.get(f"{emu.base_url}/v1/models").json()["data"][0]["id"]

        def ask(prompt_words: int, tokens: int, seed: int) -> dict:
            words = " ".join(f"w{seed}x{i}" for i in range(prompt_words))
            body = {"model": model, "prompt": words, "max_tokens": tokens,
                    "min_tokens": tokens, "ignore_eos": True}
            return httpx.post(f"{emu.base_url}/v1/completions", json=body, timeout=60).json()

        with ThreadPoolExecutor(4) as pool:
            done = list(pool.map(lambda i: ask(1000, 200, i), range(4)))
        assert all(d["usage"]["completion_tokens"] == 200 for d in done)
        text = httpx.get(f"{emu.base_url}/metrics").text
        assert total(text, "vllm:num_preemptions_total") >= 1
        first, second = ask(300, 4, 99), ask(300, 4, 99)
        cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached % 128 == 0 and cached >= 128
        text = httpx.get(f"{emu.base_url}/metrics").text
        assert total(text, "vllm:prefix_cache_hits_total") >= cached
        assert total(text, "vllm:prefix_cache_queries_total") >= 2 * first["usage"]["prompt_tokens"]
