"""Server reconciliation: the load generator scrapes the engine's /metrics
around each steady step into server_metrics.json; resources.analysis.reconcile compares
the server's counts with the client's, and the run report shows it. Against the real
emulator process, whose --metrics-token-skew deliberately miscounts generated tokens."""

from __future__ import annotations

import asyncio
import json
import socket

import httpx
import pytest
from servingbench.emulator.process import EmulatorProcess
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.analysis.reconcile import reconcile
from servingbench.resources.contract import manifest as mf
from servingbench.resources.loadgen import run_load
from servingbench.resources.loadgen.server_metrics import Scraper, delta, snapshot

from tests.support.loadgen import config, rows

SKEWED = ["--fixed-timing", "5:1", "--cold-start-s", "0"]


def _run(tmp_path, skew: str):
    with EmulatorProcess([*SKEWED, "--metrics-token-skew", skew]) as emu:
        model = httpx.get(f"{emu.base_url}/v1/models").json()["data"][0]["id"]
        cfg = config(emu.base_url, model=model, concurrency=[1, 3], rates=[40],
                     requests_per_step=6, warmup_requests=2, output_tokens=20)
        run_load(cfg, tmp_path / "run", progress=False)
    return tmp_path / "run"


@pytest.mark.parametrize("skew, flagged", [("1.05", True), ("1.0", False)])
def test_reconciliation_flags_a_wrong_server_token_count(tmp_path, skew, flagged):
    run_dir = _run(tmp_path, skew)
    doc = json.loads((run_dir / "server_metrics.json").read_text())
    names = [s["step"] for s in mf.load(run_dir / "manifest.json")["steps"]]
    assert doc["available"] and doc["emulated"] and [s["step"] for s in doc["steps"]] == names
    for s in doc["steps"]:  # the warm-up and the probe are outside every step's window
        assert s["available"] and s["requests_finished"] == 6 and s["prompt_tokens"] == 6 * 16
        assert s["ttft_count"] == 6 and s["ttft_buckets"][-1] == ["+Inf", 6.0]
    rec = reconcile(run_dir)
    by_step = {r["step"]: r for r in rec["steps"]}
    client = sum(r["output_tokens"] for r in rows(run_dir) if r["status"] == "ok")
    assert sum(r["client_tokens"] for r in rec["steps"]) == client == 3 * 6 * 20
    for r in by_step.values():
        assert r["client_requests"] == r["server_requests"] == 6 and r["request_gap"] == 0
        assert r["flagged"] is flagged
        if flagged:  # 120 tokens counted as about 126: a 5 % gap, over the 1 % tolerance
            assert r["gap"] == pytest.approx(0.05, abs=0.01) and "generated tokens" in r["reason"]
        else:
            assert r["server_tokens"] == r["client_tokens"] == 120 and r["gap"] == 0
    assert rec["flagged_steps"] == (names if flagged else [])

    # the run report writes reconciliation.json and shows it, flagged rows highlighted,
    # with the server-side TTFT histogram beside the client's
    from servingbench.resources.report import write_run_report

    analyze_run(run_dir)
    page = write_run_report(run_dir).read_text()
    assert json.loads((run_dir / "reconciliation.json").read_text()) == rec
    section = page[page.index('id="reconciliation"'):page.index('id="manifest"')]
    assert section.count('<tr class="bad">') == (len(names) if flagged else 0)
    assert ("FLAGGED" in section) is flagged and ("agrees" in section) is not flagged
    assert (run_dir / "plots" / "server_ttft.png").stat().st_size > 10_000
    assert "server-side histogram" in page


def test_a_server_without_metrics_is_recorded_as_unavailable(start_server, tmp_path):
    server = start_server("--no-metrics", ttft_ms=5, itl_ms=1)
    result = run_load(config(server.base_url, concurrency=[1, 2], requests_per_step=3),
                      tmp_path / "run", progress=False)
    assert result.statuses == {"ok": 6}  # the run itself is not affected
    doc = json.loads((tmp_path / "run" / "server_metrics.json").read_text())
    assert doc["available"] is False and doc["reason"] == "HTTP 404"
    assert [(s["step"], s["available"]) for s in doc["steps"]] == [("c=1", False), ("c=2", False)]
    rec = reconcile(tmp_path / "run")
    assert rec["available"] is False and rec["flagged_steps"] == []
    assert all(r["server_tokens"] is None and "unavailable" in r["reason"] for r in rec["steps"])


def test_a_closed_port_is_unavailable_not_an_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens
    snap, why = asyncio.run(Scraper(f"http://127.0.0.1:{port}", {}, ()).scrape())
    assert snap is None and "ConnectError" in why


def test_deltas_sum_engines_and_a_counter_reset_is_null():
    def text(gen, ok, le1):
        return (f'vllm:generation_tokens_total{{engine="0"}} {gen}\n'
                f'vllm:generation_tokens_total{{engine="1"}} 10\n'
                f'vllm:request_success_total{{finished_reason="stop"}} {ok}\n'
                f'vllm:request_success_total{{finished_reason="abort"}} 1\n'
                f'vllm:time_to_first_token_seconds_bucket{{le="0.1"}} {le1}\n'
                f'vllm:time_to_first_token_seconds_bucket{{le="+Inf"}} {ok + 1}\n'
                f'vllm:time_to_first_token_seconds_count {ok + 1}\n')
    a, b = snapshot(text(100, 4, 2)), snapshot(text(150, 9, 5))
    assert a["generation_tokens"] == 110 and a["request_success"] == {"stop": 4, "abort": 1}
    d = delta(a, b)
    assert d["generation_tokens"] == 50 and d["requests_finished"] == 5 == d["requests_ok"]
    assert d["ttft_buckets"] == [["0.1", 3.0], ["+Inf", 5.0]] and not d["counter_reset"]
    reset = delta(b, a)
    assert reset["counter_reset"] and reset["generation_tokens"] is None


LLAMACPP_TEXT = """# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 120
llamacpp:prompt_tokens_total 800
servingbench:requests_finished_total{status="200"} 4
servingbench:requests_finished_total{status="400"} 1
"""


def test_llamacpp_counters_are_read_and_a_non_200_is_not_ok():
    from servingbench.resources.loadgen.server_metrics import delta, snapshot

    before = snapshot(LLAMACPP_TEXT.replace(" 120", " 20").replace(" 4\n", " 1\n"))
    after = snapshot(LLAMACPP_TEXT)
    assert after["generation_tokens"] == 120 and after["prompt_tokens"] == 800
    d = delta(before, after)
    assert d["generation_tokens"] == 100
    assert d["requests_finished"] == 3 and d["requests_ok"] == 3
    assert d["request_success"] == {"ok": 3, "http_400": 0}
