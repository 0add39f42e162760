"""Whatever bytes a server sends, every request ends with the right status, is recorded,
the run ends (pytest-timeout fails a hang), the folder analyzes, and no secret is written."""

from __future__ import annotations

import pytest
from servingbench.pipelines.cli import main as cli
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.loadgen import LoadConfig, run_load

from tests.support.hostile import API_KEY, API_KEY_ENV, leaks
from tests.support.hostile_server import MODES
from tests.support.loadgen import rows

pytestmark = pytest.mark.slow  # a chain, a job or processes: not in `make check`

# misbehaviour -> the status every one of its requests must end with
MATRIX = {
    "good": "ok",
    "choices_int": "protocol_error",
    "choices_int_usage": "protocol_error",
    "choices_null_usage": "protocol_error",
    "endless_chunks": "protocol_error",
    "choices_str": "protocol_error",
    "tokens_str": "protocol_error",
    "tokens_2_63": "protocol_error",
    "tokens_10_digits": "protocol_error",
    "tokens_negative": "protocol_error",
    "tokens_float": "protocol_error",
    "tokens_down": "protocol_error",
    "prompt_tokens_str": "protocol_error",
    "usage_list": "protocol_error",
    "delta_int": "protocol_error",
    "text_int": "protocol_error",
    "deep_nesting": "protocol_error",
    "huge_int": "protocol_error",
    "not_json": "protocol_error",
    "non_utf8": "protocol_error",
    "endless_event": "protocol_error",
    "html_200": "protocol_error",
    "broken_chunked": "protocol_error",
    "bad_status_line": "protocol_error",
    "error_event": "protocol_error",
    "reasoning_int": "protocol_error",
    "reasoning_object": "protocol_error",
    "reasoning_tokens_str": "protocol_error",
    "reasoning_tokens_negative": "protocol_error",
    "image_tokens_negative": "protocol_error",
    "trickle": "timeout",
    "headers_then_silence": "timeout",
    "close_before_headers": "disconnect",
    "cut_mid_stream": "disconnect",
    "http_500_echo": "http_error",
    "huge_error_body": "http_error",
}


def hostile_config(base_url: str, mode: str, **kw) -> LoadConfig:
    args = dict(endpoint=base_url, model="hostile", concurrency=[8],
                requests_per_step=2 * len(MATRIX), warmup_requests=0, input_tokens=8,
                output_tokens=2, api_key_env=API_KEY_ENV, connect_timeout_s=2,
                first_token_timeout_s=1, total_timeout_s=3, drain_timeout_s=2,
                headers={"X-Hostile": mode})
    args.update(kw)
    return LoadConfig(**args)


def test_the_matrix_covers_every_misbehaviour():
    assert set(MATRIX) == set(MODES)


def check(run_dir, seen: dict[str, str], n: int) -> list[dict]:
    steady = rows(run_dir)
    assert len(steady) == n and len(seen) == n
    assert {r["request_id"] for r in steady} == set(seen)  # every request sent is recorded
    wrong = [(seen[r["request_id"]], r["status"], r["error"]) for r in steady
             if r["status"] != MATRIX[seen[r["request_id"]]]]
    assert wrong == []
    assert set(seen.values()) == set(MATRIX)  # each misbehaviour was met
    for r in steady:
        assert r["sent_at"] is not None and r["finished_at"] is not None
        assert (r["error"] is None) == (r["status"] == "ok") and len(r["error"] or "") <= 200
    return steady


@pytest.mark.timeout(180)  # a hang fails here instead of stalling the suite
def test_every_misbehaviour_in_one_run(hostile, tmp_path, monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, API_KEY)
    before = hostile.seen()
    run_dir = tmp_path / "run"
    result = run_load(hostile_config(hostile.base_url, "all"), run_dir, progress=False)
    seen = {k: v for k, v in hostile.seen().items() if k not in before}
    check(run_dir, seen, 2 * len(MATRIX))
    assert sum(result.statuses.values()) == 2 * len(MATRIX)
    analysis = analyze_run(run_dir)
    assert analysis.exit_code in (0, 3), analysis.message  # accepted or gated, never malformed
    assert leaks(run_dir) == []


@pytest.mark.timeout(240)
def test_the_commands_survive_a_hostile_server(hostile, tmp_path, capsys, caplog, monkeypatch):
    # both commands in-process, through the same entry point as `servingbench`: the process
    # boundary (exit status, a fresh import) is proven in tests/loadgen/test_cli.py and
    # tests/analysis/test_contract.py; what this proves is what a hostile server leaves
    monkeypatch.setenv(API_KEY_ENV, API_KEY)
    run_dir = tmp_path / "run"
    before = hostile.seen()
    capsys.readouterr()
    code = cli(["load", "--endpoint", hostile.base_url, "--model", "hostile", "--out", str(run_dir),
                "--concurrency", "8", "--requests", str(len(MATRIX)), "--warmup-requests", "0",
                "--input-tokens", "8", "--output-tokens", "2", "--first-token-timeout", "1",
                "--total-timeout", "3", "--drain-timeout", "2", "--api-key-env", API_KEY_ENV,
                "--header", "X-Hostile: all", "--no-progress"])
    load = capsys.readouterr()
    assert code == 0, load.err
    seen = {k: v for k, v in hostile.seen().items() if k not in before}
    check(run_dir, seen, len(MATRIX))
    code = cli(["analyze", str(run_dir)])
    analyzed = capsys.readouterr()
    assert code in (0, 3), analyzed.err
    outputs = {"load stdout": load.out, "load stderr": load.err,
               "analyze stdout": analyzed.out, "analyze stderr": analyzed.err, "log": caplog.text}
    assert leaks(run_dir, outputs) == []
