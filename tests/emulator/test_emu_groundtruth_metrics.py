"""Ground-truth lines, /metrics names and counts, absolute deadlines."""

from __future__ import annotations

import re
import time

import httpx
from servingbench.emulator.groundtruth import read
from servingbench.emulator.process import EmulatorProcess

from tests.support.emulator import USAGE_OPTS, stream


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)}\{{[^}}]*\}} (\S+)$", text, re.M)
    assert m, f"{name} missing"
    return float(m.group(1))


def test_ground_truth_records_each_request_with_chunks(fixed):
    before = len(read(fixed.gt)) if fixed.gt.exists() else 0
    body = {"prompt": "one two three", "max_tokens": 6, "ignore_eos": True, "stream": True,
            "stream_options": USAGE_OPTS}
    _, events = stream(fixed.base_url, "/v1/completions", body, headers={"X-Request-ID": "gt-1"})
    deadline = time.monotonic() + 5
    while len(read(fixed.gt)) <= before and time.monotonic() < deadline:
        time.sleep(0.01)
    rec = [r for r in read(fixed.gt) if r["request_id"] == "gt-1"][0]
    assert set(rec) == {"completion_id", "request_id", "arrival_ns", "headers_ns", "prompt_tokens",
                        "completion_tokens", "status", "chunks"}
    assert rec["completion_id"] == events[0]["id"]
    assert rec["prompt_tokens"] == 3 and rec["completion_tokens"] == 6 and rec["status"] == 200
    assert sum(k for _, _, k in rec["chunks"]) == 6
    sched = [s for s, _, _ in rec["chunks"]]
    # fixed timing 20:5 ms on absolute deadlines: exact offsets from arrival, never cumulative
    assert [s - rec["arrival_ns"] for s in sched] == [20_000_000 + 5_000_000 * k for k in range(6)]
    assert all(w >= s for s, w, _ in rec["chunks"])  # written at or after its deadline
    assert abs(rec["arrival_ns"] - time.time_ns()) < 60e9  # UTC epoch ns


def test_status_faults_are_in_the_ground_truth(fixed):
    httpx.post(fixed.base_url + "/v1/completions", json={"prompt": "x"},
               headers={"X-Servingbench-Fault": "status=429", "X-Request-ID": "gt-429"})
    time.sleep(0.05)
    rec = [r for r in read(fixed.gt) if r["request_id"] == "gt-429"][0]
    assert rec["status"] == 429 and rec["chunks"] == [] and rec["completion_tokens"] == 0


def test_metrics_names_and_counts(tmp_path):
    with EmulatorProcess(["--fixed-timing", "1:1", "--cold-start-s", "0",
                          "--metrics-token-skew", "1.05"]) as e:
        for _ in range(4):
            r = httpx.post(e.base_url + "/v1/completions",
                           json={"prompt": "a b c d e", "max_tokens": 25, "ignore_eos": True})
            assert r.status_code == 200
        text = httpx.get(e.base_url + "/metrics").text
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:gpu_cache_usage_perc"):
        _metric(text, name)
    assert _metric(text, "vllm:prompt_tokens_total") == 20
    assert _metric(text, "vllm:generation_tokens_total") == 105  # 100 × the 1.05 skew
    assert "vllm:time_to_first_token_seconds_count" in text
    assert re.search(r"^vllm:e2e_request_latency_seconds_count\{[^}]*\} 4$", text, re.M)
    assert re.search(r'^vllm:time_to_first_token_seconds_bucket\{[^}]*le="\+Inf"\} 4$', text, re.M)
    # the emulator's own lateness: one observation per written chunk (4 non-streamed bodies)
    assert re.search(r'^servingbench:emulator_write_lag_seconds_count\{[^}]*\} 4$', text, re.M)


def test_no_usage_and_no_continuous_usage_flags():
    body = {"prompt": "p", "max_tokens": 3, "ignore_eos": True, "stream": True,
            "stream_options": USAGE_OPTS}
    with EmulatorProcess(["--fixed-timing", "1:1", "--cold-start-s", "0", "--no-usage"]) as e:
        _, events = stream(e.base_url, "/v1/completions", body)
    assert not any("usage" in ev for ev in events if ev != "[DONE]")
    with EmulatorProcess(["--fixed-timing", "1:1", "--cold-start-s", "0",
                          "--no-continuous-usage"]) as e:
        _, events = stream(e.base_url, "/v1/completions", body)
    with_usage = [ev for ev in events if ev != "[DONE]" and "usage" in ev]
    assert len(with_usage) == 1 and with_usage[0]["choices"] == []


def test_fault_rate_is_seeded(tmp_path):
    def run() -> list[int]:
        with EmulatorProcess(["--fixed-timing", "1:1", "--cold-start-s", "0", "--seed", "5",
                              "--fault-rate", "status_429=0.5"]) as e:
            with httpx.Client() as c:
                return [c.post(e.base_url + "/v1/completions",
                               json={"prompt": "x", "max_tokens": 1}).status_code
                        for _ in range(16)]
    first = run()
    assert set(first) == {200, 429}
    assert run() == first
