"""The emulator standing in for other engines (the load generator's fallbacks are tested
against these): another served name, an API key, no /tokenize or /metrics, no emulated
header, an older vLLM that rejects continuous usage stats. Real HTTP on 127.0.0.1."""

from __future__ import annotations

import httpx
import pytest
from servingbench.emulator.process import EmulatorProcess

from tests.support.emulator import FIXED_MODEL, USAGE_OPTS, fixed_timing_args

KEY = "sk-emu-test-0123456789abcdef"


@pytest.fixture(scope="module")
def other():
    with EmulatorProcess([*fixed_timing_args(5, 1), "--api-key", KEY, "--no-tokenize",
                          "--no-metrics", "--no-emulated-header", "--reject-continuous"]) as e:
        yield e


def _complete(base: str, headers: dict, **extra) -> httpx.Response:
    body = {"model": FIXED_MODEL, "prompt": "a b c", "max_tokens": 3, "stream": True,
            "ignore_eos": True, **extra}
    return httpx.post(f"{base}/v1/completions", json=body, headers=headers, timeout=10)


def test_the_switches_each_change_what_a_client_meets(other):
    base, auth = other.base_url, {"Authorization": f"Bearer {KEY}"}
    ok = _complete(base, auth)
    assert ok.status_code == 200 and "x-servingbench-emulated" not in ok.headers
    assert ok.text.count('"text":') == 3
    assert _complete(base, {}).status_code == 401
    assert _complete(base, {"Authorization": "Bearer sk-wrong"}).status_code == 401
    assert KEY not in _complete(base, {"Authorization": "Bearer sk-wrong"}).text
    rejected = _complete(base, auth, stream_options=USAGE_OPTS)
    assert rejected.status_code == 400 and "continuous_usage_stats" in rejected.text
    assert _complete(base, auth, stream_options={"include_usage": True}).status_code == 200
    assert httpx.post(f"{base}/tokenize", json={"prompt": "a"}, timeout=10).status_code == 404
    assert httpx.get(f"{base}/metrics", timeout=10).status_code == 404
    models = httpx.get(f"{base}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [FIXED_MODEL]
    status = other.status()["config"]
    assert status["api_key"] is True and KEY not in str(other.status())


def test_by_default_the_emulator_keeps_every_route_and_its_label(tmp_path):
    with EmulatorProcess(fixed_timing_args(5, 1)) as e:
        r = _complete(e.base_url, {}, stream_options=USAGE_OPTS)
        assert r.status_code == 200 and r.headers["x-servingbench-emulated"] == "1"
        assert httpx.post(f"{e.base_url}/tokenize", json={"prompt": "a b"},
                          timeout=10).json()["count"] == 2
        assert httpx.get(f"{e.base_url}/metrics", timeout=10).status_code == 200
