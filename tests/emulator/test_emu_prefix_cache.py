"""The emulator's prefix cache: block hashes, LRU within capacity, shorter prefill, and
`usage.prompt_tokens_details.cached_tokens` over real HTTP."""

from __future__ import annotations

import pytest
from servingbench.emulator import specs
from servingbench.emulator.perf import PerfModel
from servingbench.emulator.prefix_cache import PrefixCache
from servingbench.emulator.process import EmulatorProcess
from servingbench.emulator.scheduler import Scheduler, Seq

from tests.support.emulator import SCOUT, USAGE_OPTS, content_chunks, stream


def test_a_repeated_prompt_hits_its_full_blocks_but_never_the_last_token():
    c = PrefixCache(capacity_tokens=1000, block=4)
    ten = list(range(10))
    assert c.admit(ten) == 0
    assert c.admit(ten) == 8  # blocks [0-3], [4-7]; [8, 9] is not a full block
    eight = list(range(8))
    assert c.admit(eight) == 4  # (8 - 1) // 4 = 1 block: the last token is always computed


def test_blocks_are_chained_so_only_a_shared_prefix_hits():
    c = PrefixCache(capacity_tokens=1000, block=4)
    c.admit([1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert c.admit([1, 2, 3, 4, 0, 0, 0, 0, 9]) == 4
    assert c.admit([0, 0, 0, 0, 5, 6, 7, 8, 9]) == 0  # same second block, other prefix


def test_least_recently_used_blocks_are_evicted_at_capacity():
    c = PrefixCache(capacity_tokens=8, block=4)  # two blocks
    a, b = [1] * 5, [2] * 5
    c.admit(a)
    c.admit(b)
    assert c.admit(a) == 4  # a is now the most recent
    c.admit([3] * 5)  # evicts b's block
    assert c.admit(b) == 0
    assert len(c.blocks) == 2


def test_a_cached_prefix_is_prefill_not_computed():
    model = PerfModel(specs.config("p5.48xlarge", "scout", "bf16", None))
    sched = Scheduler(model, max_num_seqs=8, token_budget=8192, kv_tokens=100_000)
    sched.add(Seq(4000, 4, computed=3984))
    step = sched.step()
    cold = Scheduler(model, max_num_seqs=8, token_budget=8192, kv_tokens=100_000)
    cold.add(Seq(4000, 4))
    cold_step = cold.step()
    assert len(step.emitted) == 1 and len(cold_step.emitted) == 1
    assert step.duration < cold_step.duration  # 16 prompt tokens computed instead of 4000
    # 16 query tokens attending over the cached 3,984 (their KV read once), one row sampled
    assert step.duration == pytest.approx(float(model.time(
        16, 1, 0, float(model.effective_context(3984)), 0.0, model.prefill_pairs(3984, 16), 1)))


def _cached(base_url: str, prompt: str, chat: bool = False) -> tuple[int, int]:
    body = {"model": SCOUT, "max_tokens": 3, "ignore_eos": True, "stream": True,
            "stream_options": USAGE_OPTS}
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    _, events = stream(base_url, "/v1/chat/completions" if chat else "/v1/completions", body)
    chunks = content_chunks(events, chat=chat)
    details = {c["usage"]["prompt_tokens_details"]["cached_tokens"] for c in chunks}
    final = events[-2]["usage"]
    assert details == {final["prompt_tokens_details"]["cached_tokens"]}  # every chunk agrees
    return final["prompt_tokens"], final["prompt_tokens_details"]["cached_tokens"]


def test_cached_tokens_reported_over_http(emu):
    prompt = " ".join(f"w{i}" for i in range(100))  # 100 tokens
    assert _cached(emu.base_url, prompt) == (100, 0)
    assert _cached(emu.base_url, prompt) == (100, 96)
    longer = prompt + " and then some more words"
    assert _cached(emu.base_url, longer) == (105, 96)
    first = _cached(emu.base_url, "chat " + prompt, chat=True)
    again = _cached(emu.base_url, "chat " + prompt, chat=True)
    assert first[1] == 0 and again[1] == (again[0] - 1) // 16 * 16


def test_no_prefix_cache_reports_zero():
    with EmulatorProcess(["--time-scale", "0.0005", "--cold-start-s", "0",
                          "--no-prefix-cache"]) as e:
        prompt = " ".join(f"w{i}" for i in range(100))
        assert _cached(e.base_url, prompt) == (100, 0)
        assert _cached(e.base_url, prompt) == (100, 0)
