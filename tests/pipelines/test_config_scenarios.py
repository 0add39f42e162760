"""A candidate's `scenario` picks any workload; mistakes name the key and suggest the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.catalog import load_candidates
from pipelines.config import ConfigError

GOOD = ("name: c1, instance_type: p5.48xlarge, "
        "model: meta-llama/Llama-4-Scout-17B-16E-Instruct, precision: bf16, tensor_parallel: 8")
TRACE = Path(__file__).resolve().parents[2] / "pipelines" / "traces" / "mooncake_small.jsonl"


def write(tmp_path, scenario: str) -> Path:
    p = tmp_path / "candidates.yaml"
    p.write_text(f"candidates:\n  - {{{GOOD}, scenario: {scenario}}}\n")
    return p


@pytest.mark.parametrize("scenario, kind", [
    ("{kind: multi_turn, turns: 4, think_time_s: 0.5, input_tokens: 256}", "multi_turn"),
    (f"{{kind: trace, trace: {TRACE}, trace_format: mooncake, speedup: 2}}", "trace"),
    ("{kind: batch, requests: 32, max_in_flight: 8}", "batch"),
    ("{kind: slo_search, slo: {ttft_p99_s: 2, tpot_p99_s: 0.1}, max_probes: 6}", "slo_search"),
    ("{kind: slo_search, slo: {ttft_p99_s: 2}, over: concurrency, start_concurrency: 2}",
     "slo_search"),
    ("{input_tokens: 512, output_tokens: 128, dataset: null}", None),
])
def test_every_workload_is_accepted(tmp_path, scenario, kind):
    (c,) = load_candidates(write(tmp_path, scenario))
    assert c.scenario.get("kind") == kind


def test_a_trace_path_is_relative_to_the_candidates_file(tmp_path):
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    (c,) = load_candidates(write(tmp_path, "{kind: trace, trace: t.csv, trace_format: azure}"))
    assert c.scenario["trace"] == str(tmp_path / "t.csv")


@pytest.mark.parametrize("scenario, message", [
    ("{kind: multiturn}", r"scenario\.kind: 'multiturn' .*did you mean 'multi_turn'"),
    ("{kind: multi_turn, turn: 3}", r"scenario\.turn: unknown key .*did you mean 'turns'"),
    ("{kind: batch, turns: 3}", r"scenario\.turns: unknown key for kind 'batch' \(a key of kind 'multi_turn'\)"),
    ("{kind: multi_turn, turns: 0}", r"scenario\.turns: must be a positive integer"),
    ("{kind: trace, trace_format: mooncake}", r"scenario\.trace: required"),
    ("{kind: trace, trace: nowhere.jsonl, trace_format: mooncake}", r"scenario\.trace: .* is not a file"),
    (f"{{kind: trace, trace: {TRACE}, trace_format: moon}}", r"scenario\.trace_format: 'moon' .*did you mean 'mooncake'"),
    ("{kind: slo_search, slo: {ttft_p99: 2}}", r"scenario\.slo: unknown key 'ttft_p99' .*did you mean 'ttft_p99_s'"),
    ("{kind: slo_search}", r"scenario\.slo: required"),
    ("{kind: slo_search, slo: {ttft_p99_s: 2}, over: concurency}",
     r"scenario\.over: 'concurency' .*did you mean 'concurrency'"),
    ("{kind: slo_search, slo: {ttft_p99_s: 2}, over: concurrency, start_concurrency: 0}",
     r"scenario\.start_concurrency: must be a positive integer"),
])
def test_mistakes_name_the_key(tmp_path, scenario, message):
    with pytest.raises(ConfigError, match=r"candidates\[0\]\." + message):
        load_candidates(write(tmp_path, scenario))
