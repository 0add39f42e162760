"""One road from a candidate to a load run: the chain and the load pods build the same
LoadConfig (`LoadGenerator.config`), the pods read it from a JSON file instead of flags, and
`servingbench load` builds it from flags whose defaults are LoadConfig's own."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.cli import load
from servingbench.resources.contract.candidate import DEFAULT_TARGETS, Candidate, LoadPlan
from servingbench.resources.loadgen import config_file
from servingbench.resources.loadgen.config import LoadConfig
from servingbench.resources.loadgen.errors import LoadConfigError
from servingbench.resources.loadgen.generator import LoadGenerator
from servingbench.resources.loadgen.ladder import Ladder
from servingbench.resources.loadgen.scenarios.spec import Scenario

from tests.support.fleet import candidates_file

URL = "http://127.0.0.1:9"


def flags(*more: str) -> LoadConfig:
    return load.config_from_args(load.parser().parse_args(
        ["--endpoint", URL, "--model", "m", "--out", "unused", *more]))


def configs(tmp_path: Path) -> list[LoadConfig]:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 8, "output_length": 4}\n')
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "hi"}\n')
    return [
        LoadConfig(URL, "m"),
        LoadConfig(URL, "m", concurrency=[], ladder=Ladder("rate", 1, 2.0, 64, 0.1), run_id="r1"),
        LoadConfig(URL, "m", api="chat", images=2, image_size=(640, 480), workers=3,
                   scenario=Scenario("multi_turn", turns=4, think_time_s=0.5),
                   headers={"x-fault": "drop"}, api_key_env="KEY"),
        LoadConfig(URL, "m", concurrency=[], scenario=Scenario(
            "trace", trace=trace, trace_format="mooncake", speedup=2.0)),
        LoadConfig(URL, "m", concurrency=[], scenario=Scenario(
            "slo_search", slo={"ttft_p99_s": 2.0}, over="concurrency")),
        LoadConfig(URL, "m", concurrency=[], rates=[2.0],
                   dataset=data, prefix="shared", shared_prefix_tokens=16, duration_s=3.0,
                   requests_per_step=None),
    ]


def test_a_config_survives_its_file(tmp_path):
    for i, cfg in enumerate(configs(tmp_path)):
        path = config_file.write(cfg, tmp_path / f"{i}.json")
        back = config_file.read(path)
        assert back == cfg
        # every field is in the file: it says all the run was asked for
        assert set(json.loads(path.read_text())) == {f.name for f in dataclasses.fields(cfg)}


@pytest.mark.parametrize("change, match", [
    ({"concurrenc": [4]}, r"load_config.json.concurrenc: unknown key \(did you mean 'concurrency'"),
    ({"scenario": {"kind": "multi_turns"}}, r"load_config.json.scenario.kind: 'multi_turns'"),
    ({"input_tokens": 0}, r"load_config.json: input_tokens: must be a finite positive"),
    ({"ladder": {"start": 1, "steps": 3}}, r"load_config.json.ladder: .*steps"),
    ({"endpoint": 7}, r"load_config.json: not a load config"),
])
def test_a_bad_file_is_named_with_its_key(change, match):
    data = {**config_file.to_dict(LoadConfig(URL, "m")), **change}
    with pytest.raises(LoadConfigError, match=match):
        config_file.from_dict(data)


def test_the_flags_defaults_are_the_configs():
    assert flags() == LoadConfig(URL, "m")
    cfg = flags()
    assert (cfg.input_tokens, cfg.output_tokens) == tuple(DEFAULT_TARGETS.values())
    assert tuple(cfg.concurrency) == LoadPlan.concurrency
    # a kind's own targets and keys fill what the flags leave
    batch = flags("--scenario", "batch")
    assert (batch.input_tokens, batch.output_tokens) != (cfg.input_tokens, cfg.output_tokens)
    assert batch.scenario == Scenario("batch")


def test_the_chain_and_the_flags_build_the_same_config(tmp_path):
    """A candidate with no load plan and no scenario of its own runs what `servingbench load`
    runs with no flags: one set of defaults."""
    bare = Candidate("c", "p5.48xlarge", "meta-llama/Llama-4-Scout-17B-16E-Instruct", "bf16", 8)
    assert LoadGenerator().config(bare, URL, "m", "r1") == flags("--run-id", "r1")
    (cand,) = load_candidates(candidates_file(tmp_path, {"p5-scout": "p5.48xlarge"}))
    chain = LoadGenerator().config(cand, URL, "m", "r2")
    assert chain == flags("--run-id", "r2", "--concurrency", "2", "--requests", "4",
                          "--warmup-requests", "1", "--input-tokens", "64", "--output-tokens", "16")


def test_load_runs_a_config_file_and_refuses_flags_beside_it(tmp_path, capsys):
    path = config_file.write(LoadConfig(URL, "m", concurrency=[3], run_id="r9"),
                             tmp_path / "load_config.json")
    a = load.parser().parse_args(["--config", str(path), "--out", str(tmp_path / "run")])
    assert load.config_from_args(a) == config_file.read(path)
    assert load.main(["--config", str(path), "--out", str(tmp_path / "run"),
                      "--concurrency", "4"]) == 2
    assert "--concurrency: not with --config" in capsys.readouterr().err
    assert load.main(["--out", str(tmp_path / "run")]) == 2
    assert "--endpoint: required (or --config FILE)" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{")
    assert load.main(["--config", str(tmp_path / "bad.json"), "--out", str(tmp_path / "run")]) == 2
    assert "bad.json: not JSON" in capsys.readouterr().err
