"""A candidate's `scenario` picks any workload; mistakes name the key and suggest the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.config import ConfigError

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
    ("{kind: agentic, turns: 10, max_context_tokens: 8192, tool_result_tokens: 512}", "agentic"),
    ("{input_tokens: 512, output_tokens: 64, images: 2, image_size: 1024x768}", None),
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
    ("{kind: agentic, max_context_tokens: 131072}",
     r"scenario\.max_context_tokens: 131,072 does not fit max_model_len 8,192"),
    ("{kind: agentic, tool_result: 5}", r"scenario\.tool_result: unknown key .*tool_result_tokens"),
    ("{images: 1, image_size: 1024by768}", r"scenario\.image_size: expected WIDTHxHEIGHT"),
    ("{images: -1}", r"scenario\.images: expected an integer 0\.\.64"),
])
def test_mistakes_name_the_key(tmp_path, scenario, message):
    with pytest.raises(ConfigError, match=r"candidates\[0\]\." + message):
        load_candidates(write(tmp_path, scenario))


SPEC = "speculative: {method: eagle3, draft_tokens: 3, draft_model: org/drafter}"


def test_speculative_decoding_is_a_candidate_key_each_engine_spells(tmp_path):
    from servingbench.resources.model_server.engines import get
    from servingbench.resources.model_server.engines.vllm import speculative

    p = tmp_path / "candidates.yaml"
    p.write_text(f"candidates:\n  - {{{GOOD}, {SPEC}}}\n")
    (c,) = load_candidates(p)
    assert c.speculative.draft_tokens == 3 and c.speculative.acceptance == 0.7
    setting = c.speculative.as_setting()
    assert speculative(setting) == {"method": "eagle3", "num_speculative_tokens": 3,
                                    "model": "org/drafter"}
    assert get("vllm").setting_args({"speculative": setting}) == [
        "--speculative-config",
        '{"method": "eagle3", "model": "org/drafter", "num_speculative_tokens": 3}']
    assert get("sglang").setting_args({"speculative": setting}) == [
        "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
        "--speculative-draft-model-path", "org/drafter"]
    from servingbench.resources.model_server.local.emulator import EmulatorModelServer
    args = EmulatorModelServer().args(c, tmp_path)
    assert args[args.index("--spec-draft-tokens") + 1] == "3"
    assert args[args.index("--spec-acceptance") + 1] == "0.7"


@pytest.mark.parametrize("spec, message", [
    ("{method: medusa, draft_tokens: 3}", r"speculative\.method: 'medusa' is not one of"),
    ("{method: eagle3, draft_tokens: 3}", r"speculative\.draft_model: method eagle3 needs"),
    ("{method: ngram, draft_tokens: 0}", r"speculative\.draft_tokens: expected an integer 1\.\.16"),
    ("{method: ngram, draft_tokens: 4, acceptance: 2}", r"speculative\.acceptance: expected a probability"),
    ("{method: ngram, draft_tokens: 4, k: 2}", r"speculative\.k: unknown key"),
])
def test_speculative_mistakes_name_the_key(tmp_path, spec, message):
    p = tmp_path / "candidates.yaml"
    p.write_text(f"candidates:\n  - {{{GOOD}, speculative: {spec}}}\n")
    with pytest.raises(ConfigError, match=r"candidates\[0\]\." + message):
        load_candidates(p)


def test_a_reasoning_model_names_its_parser(tmp_path):
    from servingbench.resources.model_server.engines import get
    from servingbench.resources.model_server.local.emulator import EmulatorModelServer

    p = tmp_path / "candidates.yaml"
    p.write_text(f"candidates:\n  - {{{GOOD}, reasoning: {{parser: deepseek_r1, "
                 "emulated_tokens: [100, 400]}}\n")
    (c,) = load_candidates(p)
    assert get("vllm").setting_args({"reasoning_parser": c.reasoning.parser}) == [
        "--reasoning-parser", "deepseek_r1"]
    args = EmulatorModelServer().args(c, tmp_path)
    assert args[args.index("--reasoning-tokens") + 1] == "100:400"
    p.write_text(f"candidates:\n  - {{{GOOD}, reasoning: {{parser: x, emulated_tokens: [5, 1]}}}}\n")
    with pytest.raises(ConfigError, match=r"reasoning\.emulated_tokens: expected N or \[LO, HI\]"):
        load_candidates(p)


def test_a_sweep_of_engine_args_speculation_reaches_the_emulator(tmp_path):
    from servingbench.resources.contract.candidate import Candidate
    from servingbench.resources.model_server.local.emulator import EmulatorModelServer, not_modelled

    base = dict(name="c", instance_type="p5.48xlarge", model="meta-llama/Llama-4-Scout",
                precision="bf16", tensor_parallel=8)
    for spec, k in (({"method": "ngram", "num_speculative_tokens": 3}, "3"),  # vLLM's words
                    ({"algorithm": "EAGLE", "num_steps": 2}, "2"), (4, "4")):  # SGLang's, a count
        c = Candidate(**base, engine_args={"speculative": spec})
        args = EmulatorModelServer().args(c, tmp_path)
        assert args[args.index("--spec-draft-tokens") + 1] == k and not_modelled(c.engine_args) == []
    p = tmp_path / "candidates.yaml"
    p.write_text(f"candidates:\n  - {{{GOOD}, {SPEC}, engine_args: {{speculative: 4}}}}\n")
    with pytest.raises(ConfigError, match=r"engine_args\.speculative: the candidate's `speculative`"):
        load_candidates(p)


def test_a_scenario_that_is_not_a_mapping_names_every_kind_the_files_declare(tmp_path):
    from servingbench.resources.loadgen.scenarios.spec import KINDS

    with pytest.raises(ConfigError, match=r"candidates\[0\]\.scenario: expected a mapping") as err:
        load_candidates(write(tmp_path, "burst"))
    # the kinds come from their files (scenarios/<kind>.py), not from a list in config.py
    assert f"kind ({', '.join(KINDS)})" in str(err.value) and "schedule" in str(err.value)
