"""The emulator's reasoning mode, image accounting and speculative decoding, in process and
over real HTTP."""

from __future__ import annotations

import base64
import math
import struct
import zlib

import httpx
import pytest
from servingbench.emulator import specs, vision
from servingbench.emulator.perf import PerfModel
from servingbench.emulator.process import EmulatorProcess
from servingbench.emulator.scheduler import Scheduler, Seq
from servingbench.emulator.speculative import Speculative

from tests.support.emulator import USAGE_OPTS, stream


def _png(width: int, height: int) -> str:
    """A minimal PNG data URL (the emulator reads only its header)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(bytes(width + 1) * height)) + chunk(b"IEND", b""))
    return "data:image/png;base64," + base64.b64encode(raw).decode()


# --- images: Llama 4's tiling, computed by hand ----------------------------------------------
@pytest.mark.parametrize(("width", "height", "grid", "tokens"), [
    (336, 336, (1, 1), 147),      # one tile: start, <|image|>, 144 patches, end
    (100, 100, (1, 1), 147),      # (1, 1) and (1, 2) both upscale 3.36x: the smaller area wins
    (512, 512, (2, 2), 727),      # 672/512 = 1.3125 on both sides: 147 + 4 × 145
    (1024, 768, (3, 4), 1887),    # rows 3 × 336 = 1008 ≥ 768, columns 4 × 336 = 1344 ≥ 1024
    (2000, 200, (1, 6), 1017),    # 6 × 336 = 2016 ≥ 2000 (scale 1.008); 147 + 6 × 145
    (8000, 8000, (4, 4), 2467),   # no canvas holds it: the largest downscale, 16 tiles
])
def test_image_tokens_follow_llama4_tiling(width, height, grid, tokens):
    assert vision.best_fit(height, width) == grid
    assert vision.image_tokens(width, height) == tokens


def test_png_header_is_read_and_a_bad_image_refused():
    assert vision.data_url_size(_png(640, 480)) == (640, 480)
    for bad in ("http://example.com/x.png", "data:image/png;base64,AAAA", 7):
        with pytest.raises(vision.ImageError):
            vision.data_url_size(bad)


@pytest.fixture(scope="module")
def workload_emu(tmp_path_factory):
    """Fixed timing, 6 reasoning tokens per answer, speculative decoding (3 drafts, p 0.6)."""
    gt = tmp_path_factory.mktemp("gtw") / "gt.jsonl"
    with EmulatorProcess(["--fixed-timing", "5:1", "--cold-start-s", "0", "--seed", "5",
                          "--reasoning-tokens", "6", "--spec-draft-tokens", "3",
                          "--spec-acceptance", "0.6", "--ground-truth", str(gt)]) as e:
        e.gt = gt
        yield e


def test_image_prefill_tokens_over_http(workload_emu):
    text = [{"type": "text", "text": "describe this"}]
    image = {"type": "image_url", "image_url": {"url": _png(1024, 768)}}
    plain = httpx.post(workload_emu.base_url + "/tokenize",
                       json={"messages": [{"role": "user", "content": text}]}).json()["count"]
    both = httpx.post(workload_emu.base_url + "/tokenize",
                      json={"messages": [{"role": "user", "content": [*text, image]}]}).json()
    assert both["count"] == plain + 1887
    r = httpx.post(workload_emu.base_url + "/v1/chat/completions", json={
        "messages": [{"role": "user", "content": [*text, {"type": "image_url",
                                                           "image_url": {"url": "nope"}}]}],
        "max_tokens": 4})
    assert r.status_code == 400 and "image_url" in r.json()["error"]["message"]


# --- reasoning ---------------------------------------------------------------------------------
@pytest.mark.parametrize("chat", [True, False])
def test_reasoning_streams_first_then_the_answer(workload_emu, chat):
    body = {"max_tokens": 20, "ignore_eos": True, "stream": True, "stream_options": USAGE_OPTS}
    if chat:
        body["messages"] = [{"role": "user", "content": "think first"}]
    else:
        body["prompt"] = "think first"
    _, events = stream(workload_emu.base_url,
                       "/v1/chat/completions" if chat else "/v1/completions", body)
    kinds, counts = [], []
    for e in events[:-1]:
        if not e["choices"]:
            continue
        c = e["choices"][0]
        part = c["delta"] if chat else c
        if part.get("reasoning_content"):
            kinds.append("reasoning")
        elif part.get("content") or part.get("text"):
            kinds.append("answer")
        else:
            continue
        counts.append(e["usage"]["completion_tokens"])
    tokens = [b - a for a, b in zip([0, *counts], counts, strict=False)]
    reasoning = sum(t for t, k in zip(tokens, kinds, strict=True) if k == "reasoning")
    assert reasoning == 6 and sum(tokens) == 20
    assert kinds == sorted(kinds, key=lambda k: k == "answer")  # all reasoning comes first
    final = events[-2]["usage"]
    assert final["completion_tokens_details"] == {"reasoning_tokens": 6}


# --- speculative decoding ------------------------------------------------------------------------
def test_acceptance_rate_matches_the_configured_probability():
    spec = Speculative(4, 0.7, seed=1)
    steps = 20_000
    for _ in range(steps):
        spec.step(room=100)
    expected = spec.expected_rate()  # (0.7 + 0.49 + 0.343 + 0.2401) / 4
    assert expected == pytest.approx(0.443275)
    rate = spec.accepted / spec.drafted
    # accepted per step has variance ≤ k²/4: the mean's standard error over n steps
    sigma = math.sqrt(4 ** 2 / 4 / steps) / 4
    assert abs(rate - expected) < 4 * sigma


def test_a_speculative_step_emits_several_tokens_for_the_price_of_one_pass():
    model = PerfModel(specs.config("p5.48xlarge", "scout", "bf16", None))
    spec = Speculative(3, 1.0)  # every draft accepted: 4 tokens a step
    sched = Scheduler(model, 8, 8192, 100_000, spec)
    seq = Seq(100, 10)
    sched.add(seq)
    sched.step()  # prefill: the first token
    step = sched.step()
    assert step.tokens[seq] == 4 and seq.generated == 5
    sched.step()  # 4 more: 9
    last = sched.step()
    assert last.tokens.get(seq, 1) == 1 and seq in last.finished  # capped at the output left
    assert spec.drafted == 9 and spec.accepted == 9


def test_spec_counters_on_metrics_and_multi_token_chunks(workload_emu):
    before = httpx.get(workload_emu.base_url + "/metrics").text
    body = {"prompt": "go", "max_tokens": 60, "ignore_eos": True, "stream": True,
            "stream_options": USAGE_OPTS}
    _, events = stream(workload_emu.base_url, "/v1/completions", body)
    counts = [e["usage"]["completion_tokens"] for e in events[:-1] if e["choices"]]
    steps = [b - a for a, b in zip([0, *counts], counts, strict=False)]
    assert sum(steps) == 60 and max(steps) > 1 and max(steps) <= 4
    after = httpx.get(workload_emu.base_url + "/metrics").text

    def counter(text: str, name: str) -> float:
        line = next(x for x in text.splitlines() if x.startswith(name + "{"))
        return float(line.rsplit(" ", 1)[1])

    drafted = (counter(after, "vllm:spec_decode_num_draft_tokens_total")
               - counter(before, "vllm:spec_decode_num_draft_tokens_total"))
    accepted = (counter(after, "vllm:spec_decode_num_accepted_tokens_total")
                - counter(before, "vllm:spec_decode_num_accepted_tokens_total"))
    # every chunk after the first is one verify step, except where the end of the reasoning
    # split a step's tokens into two events
    verify_steps = drafted / 3
    assert verify_steps in (len(steps) - 1, len(steps) - 2)
    # each step emits 1 + accepted tokens, the last one capped at the output left
    assert 59 - verify_steps <= accepted <= drafted
