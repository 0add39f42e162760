"""One combination of a sweep through the whole chain on the embedded default: its own
partition, its engine arguments handed to the emulator, its load ladder run as ordinary
steps, and its manifest recording the sweep and the accelerators."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.config import REPO
from pipelines.profiles import Settings
from resources.contract import manifest as mf
from resources.loadgen.generator import LoadGenerator
from tests.support.chain import materialized, run_job

SHEET = REPO / "pipelines" / "price_sheet.yaml"


def test_a_sweep_member_runs_the_chain_with_its_ladder_and_engine_args(tmp_path):
    cands = tmp_path / "cands.yaml"
    cands.write_text(
        f"defaults: {{price: {{sheet: {SHEET}}}}}\n"
        "candidates:\n"
        "  - {name: p5, instance_type: p5.48xlarge, model: meta-llama/Llama-4-Scout-17B-16E-Instruct,"
        " precision: bf16, tensor_parallel: 8}\n"
        "sweeps:\n"
        "  s:\n"
        "    base: {instance_type: p5.48xlarge, model: meta-llama/Llama-4-Scout-17B-16E-Instruct,\n"
        "           precision: bf16, tensor_parallel: 8, scenario: {input_tokens: 32, output_tokens: 8},\n"
        "           load: {ladder: {start: 1, factor: 2, max: 8, min_gain: 0.05},\n"
        "                  requests_per_step: 8, warmup_requests: 2}}\n"
        "    matrix:\n"
        "      engine_args.max_num_seqs: [2]\n"
        "      precision: [fp8]\n")
    settings = Settings(data_dir=tmp_path / "data", candidates_file=cands, cold_start_s=0,
                        time_scale=2.0, load=LoadGenerator())
    result, defs = run_job(tmp_path, candidate="s-fp8-seqs2", settings=settings)
    assert result.success, [e.event_specific_data.error.message for e in result.all_events
                            if e.is_step_failure]
    # the nightly schedule runs the file's own candidates, not the sweep's
    assert "s-fp8-seqs2" in defs.resources["candidates"]
    run_dir = Path(materialized(result)["provisioned_cluster"]["run_dir"])
    m = mf.load(run_dir / "manifest.json")
    assert m["sweep"] == {"name": "s", "settings": {"engine_args.max_num_seqs": 2,
                                                    "precision": "fp8"}}
    assert (m["accelerator"], m["accelerators_per_node"], m["precision"]) == ("H100", 8, "fp8")
    deployment = json.loads((run_dir / "deployment.json").read_text())
    assert deployment["config"]["max_num_seqs"] == 2
    assert deployment["config"]["precision"] == "fp8"
    # the ladder: c=4 gains nothing over c=2 with a batch capped at 2, so it stops there and
    # never runs c=8 (earlier only if a step was invalid: client-limited on a crowded host)
    steps = [s["step"] for s in m["steps"]]
    assert steps and steps == ["c=1", "c=2", "c=4"][:len(steps)]
    assert all(s["load_mode"] == "concurrency" for s in m["steps"])


@pytest.mark.slow
@pytest.mark.timeout(600)  # a run process with its own chain on a shared 2-core machine
def test_run_sweep_runs_the_members_that_fit_and_lists_the_skipped(tmp_path, monkeypatch, capsys):
    """`servingbench run --sweep`: each member that fits as its own run process, under the
    pools; the member that does not fit is named with its reason and never started."""
    from pipelines.cli import main as cli

    cands = tmp_path / "c.yaml"
    cands.write_text(
        f"defaults: {{price: {{sheet: {SHEET}}}}}\n"
        "pools: {g6e: 1}\n"
        "candidates:\n"
        "  - {name: g6e, instance_type: g6e.48xlarge, model: meta-llama/Llama-4-Scout-17B-16E-Instruct,"
        " precision: bf16, tensor_parallel: 8, scenario: {input_tokens: 32, output_tokens: 4},"
        " load: {concurrency: [1], requests_per_step: 3, warmup_requests: 1}}\n"
        "sweeps:\n"
        "  q:\n    base: g6e\n    matrix: {tensor_parallel: [2, 8]}\n")
    for k, v in {"DAGSTER_HOME": tmp_path / "home", "SERVINGBENCH_DATA_DIR": tmp_path / "data",
                 "SERVINGBENCH_CANDIDATES": cands, "SERVINGBENCH_EMULATOR_TIME_SCALE": "0.2",
                 "SERVINGBENCH_EMULATOR_COLD_START_S": "0.2"}.items():
        monkeypatch.setenv(k, str(v))
    monkeypatch.delenv("SERVINGBENCH_PROFILE", raising=False)
    assert cli(["run", "--sweep", "q", "--parallel", "2", "--date", "2026-11-29"]) == 0
    out = capsys.readouterr().out
    assert "skipped q-tp2: pre-flight fit check: DOES NOT FIT" in out
    assert "1 candidates for 2026-11-29, 2 at once; pools g6e: 1" in out
    assert "done: q-tp8" in out and "1 of 1 candidates" in out
    (run,) = (tmp_path / "data" / "runs").iterdir()
    assert mf.load(run / "manifest.json")["sweep"] == {"name": "q", "settings": {"tensor_parallel": 8}}
    assert cli(["run", "--sweep", "nope"]) == 2
    assert "unknown sweep 'nope'; known: q" in capsys.readouterr().err
