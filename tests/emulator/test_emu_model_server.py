"""The modelled engine over real HTTP: the ground truth shows the model's step times."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from servingbench.emulator import specs
from servingbench.emulator.groundtruth import read
from servingbench.emulator.perf import PerfModel
from servingbench.emulator.process import EmulatorProcess

from tests.support.emulator import stream

# the modelled step times are checked against when the server wrote: make test's serial pass
pytestmark = pytest.mark.serial

SCALE = 0.01


def _records(path, n, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(read(path)) >= n:
            return read(path)
        time.sleep(0.02)
    raise AssertionError(f"expected {n} ground-truth lines")


def test_lone_request_is_scheduled_at_the_modelled_step_times(tmp_path):
    gt = tmp_path / "gt.jsonl"
    m = PerfModel(specs.config("p5.48xlarge", "scout", "bf16"))
    prompt_text = " ".join(["tok"] * 300)
    with EmulatorProcess(["--time-scale", str(SCALE), "--cold-start-s", "0",
                          "--ground-truth", str(gt)]) as e:
        stream(e.base_url, "/v1/completions",
               {"prompt": prompt_text, "max_tokens": 10, "ignore_eos": True, "stream": True})
        rec = _records(gt, 1)[0]
    sched = [s for s, _, _ in rec["chunks"]]
    assert rec["prompt_tokens"] == 300 and len(sched) == 10
    scale_ns = SCALE * 1e9
    prefill = int(m.step_time(300, 0, 0.0, m.prefill_pairs(0, 300)) * scale_ns)
    assert prefill <= sched[0] - rec["arrival_ns"] < prefill + 500_000_000  # + admission delay
    expected = []
    for i in range(1, 10):
        ctx = m.effective_context(300 + i)
        expected.append(int(m.step_time(0, 1, ctx, ctx) * scale_ns))
    assert [b - a for a, b in zip(sched, sched[1:], strict=False)] == expected


def test_concurrent_requests_share_steps_and_itl_grows(tmp_path):
    gt = tmp_path / "gt.jsonl"
    body = {"prompt": "x y z", "max_tokens": 100, "ignore_eos": True, "stream": True}
    scale = 0.5  # steps of ~2 ms: the 16 requests overlap for most of their ~250 ms
    with EmulatorProcess(["--time-scale", str(scale), "--cold-start-s", "0",
                          "--ground-truth", str(gt)]) as e:
        stream(e.base_url, "/v1/completions", body)
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda _: stream(e.base_url, "/v1/completions", body), range(16)))
        recs = _records(gt, 17)
        assert httpx.get(e.base_url + "/metrics").status_code == 200
    lone, batch = recs[0], recs[1:]
    by_time: dict[int, int] = {}
    for r in batch:
        for s, _, _ in r["chunks"]:
            by_time[s] = by_time.get(s, 0) + 1
    assert max(by_time.values()) >= 8  # one engine step wrote tokens of many streams together

    def mean_itl(r) -> float:
        s = [c[0] for c in r["chunks"]]
        return (s[-1] - s[1]) / (len(s) - 2)

    assert sum(mean_itl(r) for r in batch) / len(batch) > mean_itl(lone) * 1.2
    assert mean_itl(lone) == pytest.approx(
        PerfModel(specs.config("p5.48xlarge", "scout", "bf16")).decode_step(1, 3 + 50) * scale * 1e9,
        rel=0.05)


def test_a_stalled_stream_does_not_hold_up_new_requests():
    body = {"prompt": "p", "max_tokens": 5, "ignore_eos": True, "stream": True}
    with EmulatorProcess(["--time-scale", str(SCALE), "--cold-start-s", "0"]) as e:
        with ThreadPoolExecutor(1) as pool:
            stalled = pool.submit(stream, e.base_url, "/v1/completions", body,
                                  {"X-Servingbench-Fault": "stall_s=2"})
            time.sleep(0.3)  # the stalled one has its first token and is paused now
            t0 = time.monotonic()
            _, events = stream(e.base_url, "/v1/completions", body)
            quick = time.monotonic() - t0
            assert events[-1] == "[DONE]"
            assert not stalled.done() and quick < 1.5  # not held for the 2 s stall
            assert stalled.result()[1][-1] == "[DONE]"
