"""A proxy variable in the environment (a pod's, an operator's shell) never routes the
project's own HTTP through that proxy: the engine's endpoints are plain HTTP and the
requests carry the bearer key, so a proxy would read it. Every client that talks to the
engine is built with `trust_env=False` (the measured client opens its own sockets).

The proxy here is real (a socket on 127.0.0.1 that records what reaches it and answers
502); the engine is the emulator as a real process, started before the variables are set."""

from __future__ import annotations

import asyncio
import urllib.request

import pytest
from servingbench.resources.loadgen.probe import probe
from servingbench.resources.loadgen.prompts import Tokenizer
from servingbench.resources.loadgen.server_metrics import Scraper
from servingbench.resources.quality.evalset import Item
from servingbench.resources.quality.evaluate import evaluate

from tests.support.emulator import FIXED_MODEL, FixedTimingServer
from tests.support.loadgen import config
from tests.support.proxy import RecordingProxy

KEY = "sk-proxy-test-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}




@pytest.fixture
def engine(tmp_path):
    s = FixedTimingServer(tmp_path, ttft_ms=2, itl_ms=1)
    yield s
    s.stop()


@pytest.fixture
def proxied(engine, monkeypatch):
    """The engine is up; from now on every proxy variable names the recording proxy."""
    proxy = RecordingProxy()
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, proxy.url)
        monkeypatch.setenv(name.lower(), proxy.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    # urllib's shared opener reads the variables once, when first built: rebuild it now,
    # and again after the test (the variables gone) so no later test inherits the proxy
    urllib.request.install_opener(None)
    yield proxy
    urllib.request.install_opener(None)
    proxy.close()


def _nothing_through(proxy: RecordingProxy) -> None:
    assert proxy.seen == [], f"sent through the proxy: {proxy.seen[:1]!r}"


def test_the_tokenizer_ignores_proxy_variables(engine, proxied):
    tok = Tokenizer(engine.base_url, FIXED_MODEL, AUTH, enabled=True)
    assert tok.count("one two three") > 0
    assert tok.available  # the server's count, not the per-word estimate
    _nothing_through(proxied)


def test_the_probe_ignores_proxy_variables(engine, proxied):
    opts, emulated = probe(config(engine.base_url), AUTH, (KEY,))
    assert emulated and opts is not None
    _nothing_through(proxied)


def test_the_server_metrics_scrape_ignores_proxy_variables(engine, proxied):
    snapshot, why = asyncio.run(Scraper(engine.base_url, AUTH, (KEY,)).scrape())
    assert why is None and snapshot is not None
    _nothing_through(proxied)


def test_the_quality_evaluation_ignores_proxy_variables(engine, proxied, tmp_path):
    items = [Item("a1", "arithmetic", "1 + 1 =", "2")]
    summary = evaluate(engine.base_url, FIXED_MODEL, "r1", tmp_path, "tiny", items,
                       max_tokens=2, headers=AUTH, timeout_s=10)
    assert summary["n"] == 1
    _nothing_through(proxied)


def test_the_local_engines_readiness_check_ignores_proxy_variables(engine, proxied):
    from servingbench.resources.model_server.local.llamacpp import LlamaCppProcess

    proc = LlamaCppProcess([])
    proc.port = engine.port  # the readiness check only: /v1/models on the engine's port
    assert proc._models_ok()
    _nothing_through(proxied)


def test_the_recording_proxy_sees_a_client_that_trusts_the_environment(engine, proxied):
    """The check can fail: httpx's default client does go through the proxy."""
    import httpx

    with httpx.Client(timeout=5) as http:
        assert http.get(f"{engine.base_url}/health").status_code == 502
    assert proxied.seen and proxied.seen[0].startswith(b"GET http://127.0.0.1:")
