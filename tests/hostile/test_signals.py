"""A load run borrows SIGTERM/SIGINT and gives them back: after it ends (normally or by a
SIGTERM), the handlers that were installed before are installed again."""

from __future__ import annotations

import os
import signal
import threading

import pytest
from servingbench.resources.loadgen import LoadConfig, run_load

from tests.support.loadgen import rows

KW = dict(model="hostile", concurrency=[2], warmup_requests=0, input_tokens=8, output_tokens=2,
          drain_timeout_s=2, use_tokenize=False)


@pytest.fixture
def own_handlers():
    calls: list[int] = []

    def handler(signum, frame):
        calls.append(signum)

    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    for s in saved:
        signal.signal(s, handler)
    yield handler, calls
    for s, h in saved.items():
        signal.signal(s, h)


@pytest.mark.timeout(60)
def test_handlers_are_restored_after_a_run(hostile, tmp_path, own_handlers):
    handler, calls = own_handlers
    run_load(LoadConfig(endpoint=hostile.base_url, requests_per_step=2, **KW), tmp_path / "run",
             progress=False)
    assert signal.getsignal(signal.SIGTERM) is handler
    assert signal.getsignal(signal.SIGINT) is handler
    os.kill(os.getpid(), signal.SIGTERM)  # delivered to ours again, not ignored or fatal
    assert calls == [signal.SIGTERM]


@pytest.mark.timeout(60)
def test_sigterm_mid_run_keeps_records_and_restores_handlers(hostile, tmp_path, own_handlers):
    handler, calls = own_handlers
    cfg = LoadConfig(endpoint=hostile.base_url, requests_per_step=4, first_token_timeout_s=30,
                     total_timeout_s=30, headers={"X-Hostile": "headers_then_silence"}, **KW)
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_load(cfg, tmp_path / "run", progress=False)
    finally:
        timer.cancel()
    steady = rows(tmp_path / "run")
    assert [r["status"] for r in steady] == ["cancelled", "cancelled"]  # both in flight, kept
    assert calls == []  # the run's handler took that SIGTERM
    assert signal.getsignal(signal.SIGTERM) is handler
    assert signal.getsignal(signal.SIGINT) is handler
