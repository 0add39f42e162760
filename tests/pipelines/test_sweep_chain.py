"""A sweep through `servingbench run --sweep`: each combination that fits as its own run
process, through the whole chain on the embedded default (its own partition, its engine
arguments handed to the emulator, its load ladder run as ordinary steps, its manifest
recording the sweep and the accelerators); the combination that does not fit is named with
its reason and never started.

One run proves both: the member's chain is the run process that `--sweep` starts, so its
folder is read here rather than running the same member again in-process."""

from __future__ import annotations

import json

import pytest
from servingbench.pipelines.config import REPO
from servingbench.resources.contract import manifest as mf

SHEET = REPO / "pipelines" / "price_sheet.yaml"


@pytest.mark.slow
@pytest.mark.timeout(600)  # a run process with its own chain on a shared 2-core machine
def test_run_sweep_runs_each_member_that_fits_with_its_ladder_and_engine_args(
        tmp_path, monkeypatch, capsys):
    from servingbench.pipelines.cli import main as cli

    cands = tmp_path / "c.yaml"
    cands.write_text(
        f"defaults: {{price: {{sheet: {SHEET}}}}}\n"
        "pools: {p5: 1}\n"
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
        "      precision: [fp8]\n"
        "      tensor_parallel: [1, 8]\n")
    # time scale 2: each modelled step well above a loaded machine's noise, so the ladder's
    # gain (or its absence) is the server's batch cap, not the client
    for k, v in {"DAGSTER_HOME": tmp_path / "home", "SERVINGBENCH_DATA_DIR": tmp_path / "data",
                 "SERVINGBENCH_CANDIDATES": cands, "SERVINGBENCH_EMULATOR_TIME_SCALE": "2.0",
                 "SERVINGBENCH_EMULATOR_COLD_START_S": "0"}.items():
        monkeypatch.setenv(k, str(v))
    monkeypatch.delenv("SERVINGBENCH_PROFILE", raising=False)
    assert cli(["run", "--sweep", "s", "--parallel", "2", "--date", "2026-11-29"]) == 0
    out = capsys.readouterr().out
    assert "skipped s-tp1-fp8-seqs2: pre-flight fit check: DOES NOT FIT" in out
    assert "1 candidates for 2026-11-29, 2 at once; pools p5: 1" in out
    assert "done: s-tp8-fp8-seqs2" in out and "1 of 1 candidates" in out
    (run_dir,) = (tmp_path / "data" / "runs").iterdir()
    m = mf.load(run_dir / "manifest.json")
    assert m["sweep"] == {"name": "s", "settings": {"engine_args.max_num_seqs": 2,
                                                    "precision": "fp8", "tensor_parallel": 8}}
    assert m["candidate"] == "s-tp8-fp8-seqs2"
    assert (m["accelerator"], m["accelerators_per_node"], m["precision"]) == ("H100", 8, "fp8")
    deployment = json.loads((run_dir / "deployment.json").read_text())
    assert deployment["config"]["max_num_seqs"] == 2
    assert deployment["config"]["precision"] == "fp8"
    # the ladder: c=4 gains nothing over c=2 with a batch capped at 2, so it stops there and
    # never runs c=8 (earlier only if a step was invalid: client-limited on a crowded host)
    steps = [s["step"] for s in m["steps"]]
    assert steps and steps == ["c=1", "c=2", "c=4"][:len(steps)]
    assert all(s["load_mode"] == "concurrency" for s in m["steps"])
    assert cli(["run", "--sweep", "nope"]) == 2
    assert "unknown sweep 'nope'; known: s" in capsys.readouterr().err
