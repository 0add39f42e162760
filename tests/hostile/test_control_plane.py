"""Control-plane answers are capped in size and time and never inflated: a gzip bomb, an
endless body or a trickle on /metrics or /tokenize costs a bounded read, never the run.
A probe that meets a hostile answer ends the command with exit 2 and a message."""

from __future__ import annotations

import json

import pytest
from servingbench.pipelines.cli import main as cli
from servingbench.resources.loadgen import LoadConfig, LoadError, prompts, run_load, server_metrics

from tests.support.hostile import API_KEY, API_KEY_ENV, leaks
from tests.support.loadgen import rows

KW = dict(model="hostile", concurrency=[1], requests_per_step=2, warmup_requests=0,
          input_tokens=8, output_tokens=2, first_token_timeout_s=1, total_timeout_s=3,
          drain_timeout_s=2, api_key_env=API_KEY_ENV)


# Serial: the reads are bounded at 1 s, and which bound a bomb or a flood meets first (its
# encoding, its size, or the 1 s) decides the reason checked. The other tests here end in
# the same outcome however slow the machine (a timeout is an error too, an estimate is
# the fallback of every failed /tokenize): they run in the parallel pass.
@pytest.mark.serial
@pytest.mark.timeout(90)
@pytest.mark.parametrize(("control", "why", "bound_s"), [
    ("gzip_bomb", "compressed /metrics answer", 1.0), ("huge", "larger than", 1.0),
    # a trickle lasts until the bound, once per read (the /tokenize and each /metrics
    # scrape): a shorter bound, as one byte comes every 0.1 s
    ("trickle", "no complete answer within", 0.4)])
def test_a_hostile_metrics_or_tokenize_answer_costs_a_bounded_read(
        start_hostile, tmp_path, monkeypatch, control, why, bound_s):
    monkeypatch.setenv(API_KEY_ENV, API_KEY)
    monkeypatch.setattr(server_metrics, "SCRAPE_TIMEOUT_S", bound_s)
    monkeypatch.setattr(prompts, "TOKENIZE_DEADLINE_S", bound_s)
    srv = start_hostile("--control", control)
    run_load(LoadConfig(endpoint=srv.base_url, **KW), tmp_path / "run", progress=False)
    assert {r["status"] for r in rows(tmp_path / "run")} == {"ok"}
    sm = json.loads((tmp_path / "run" / "server_metrics.json").read_text())
    assert sm["available"] is False and why in sm["reason"]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["scenario"]["prompt_sizing"] == "estimate"  # /tokenize given up, not hung
    assert leaks(tmp_path / "run") == []


@pytest.mark.timeout(90)
def test_wrong_types_from_tokenize_fall_back_to_estimates(start_hostile, tmp_path, monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, API_KEY)
    srv = start_hostile("--control", "wrong_types")
    run_load(LoadConfig(endpoint=srv.base_url, **KW), tmp_path / "run", progress=False)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["scenario"]["prompt_sizing"] == "estimate"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("probe", ["close_before_headers", "headers_then_silence", "trickle",
                                   "huge_error_body", "bad_status_line", "http_500_echo"])
def test_a_hostile_probe_is_exit_2_with_a_message(start_hostile, tmp_path, probe, monkeypatch,
                                                  capsys, caplog):
    # in-process: the command's exit status is what main returns (the process boundary is
    # proven in tests/analysis/test_contract.py); an exception escaping it fails the test
    monkeypatch.setenv(API_KEY_ENV, API_KEY)
    srv = start_hostile("--probe", probe)
    out = tmp_path / "run"
    code = cli(["load", "--endpoint", srv.base_url, "--model", "m", "--out", str(out),
                "--concurrency", "1", "--requests", "1", "--connect-timeout", "2",
                "--first-token-timeout", "1", "--api-key-env", API_KEY_ENV, "--no-progress"])
    said = capsys.readouterr()
    assert code == 2, (code, said.err)
    assert "servingbench load: error:" in said.err
    assert leaks(tmp_path, {"stderr": said.err, "stdout": said.out, "log": caplog.text}) == []


def test_the_probe_raises_load_error_in_process(start_hostile, tmp_path):
    srv = start_hostile("--probe", "close_before_headers")
    with pytest.raises(LoadError):
        run_load(LoadConfig(endpoint=srv.base_url, **{**KW, "api_key_env": None}),
                 tmp_path / "run", progress=False)
