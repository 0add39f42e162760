"""The demo's two-model candidate end to end on the embedded default (EMULATED): the
manifest lists its models, the request log names both, events.parquet holds each model's
start-up load and the swaps the alternating bursts forced, and the analysis writes
swaps.parquet and one derived_metrics_by_model row per step and model."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from servingbench.pipelines.cli import main as cli

pytestmark = pytest.mark.slow
NAME = "p5-scout-two-models-swapped"


def test_the_two_model_candidate_runs_and_is_analysed(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    (tmp_path / "dagster").mkdir()
    assert cli(["demo", "--only", NAME, "--data-dir", str(tmp_path / "data"),
                "--concurrency", "1,4", "--requests", "40"]) == 0
    (run,) = (tmp_path / "data" / "runs").iterdir()
    manifest = json.loads((run / "manifest.json").read_text())
    assert [(m["name"], m["placement"]) for m in manifest["models"]] == [
        ("scout-bf16", "swapped"), ("scout-fp8", "swapped")]
    log = pq.read_table(run / "steady_state_request_log.parquet").to_pylist()
    assert {r["model"] for r in log} == {"scout-bf16", "scout-fp8"}
    assert {r["status"] for r in log} == {"ok"}
    swaps = pq.read_table(run / "swaps.parquet").to_pylist()
    kinds = [s["kind"] for s in swaps]
    assert kinds.count("model_load") == 2
    assert kinds.count("model_sleep") >= 1 and kinds.count("model_wake") >= 1
    by_model = pq.read_table(run / "derived_metrics_by_model.parquet").to_pylist()
    steps = {s["step"] for s in manifest["steps"]}
    assert {(r["step"], r["model"]) for r in by_model} == {
        (s, m) for s in steps for m in ("scout-bf16", "scout-fp8")}
