"""The embedded default's model server for a candidate with several models: one emulator
serving all of them, behind the swap driver's process when any is swapped; each model's
start-up load and every swap land in the run's events.parquet, EMULATED."""

from __future__ import annotations

import httpx
import pyarrow.parquet as pq
from servingbench.pipelines.catalog import load_candidates
from servingbench.resources.model_server.local.emulator import EmulatorModelServer

SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"


def _candidate(tmp_path, placement: str):
    path = tmp_path / "candidates.yaml"
    level = ", sleep_level: 1" if placement == "swapped" else ""
    path.write_text(
        "candidates:\n  - {name: two, instance_type: p5.48xlarge, model: " + SCOUT
        + ", precision: bf16, tensor_parallel: 8, models: ["
        + f"{{name: big, model: {SCOUT}, precision: bf16, placement: {placement}, "
        f"memory_share: 0.55, request_share: 0.5{level}}}, "
        + f"{{name: small, model: {SCOUT}, precision: fp8, placement: {placement}, "
        f"memory_share: 0.4, request_share: 0.5{level}}}]}}\n")
    return load_candidates(path)[0]


def _ask(endpoint: str, model: str) -> int:
    r = httpx.post(f"{endpoint}/v1/completions", timeout=30,
                   json={"model": model, "prompt": "hi", "max_tokens": 3})
    assert r.status_code != 200 or r.json()["model"] == model
    return r.status_code


def test_swapped_models_go_through_the_swap_driver(tmp_path):
    run_dir = tmp_path / "run-1"
    run_dir.mkdir()
    server = EmulatorModelServer(time_scale=0.001, cold_start_s=0.02)
    with server.deploy(_candidate(tmp_path, "swapped"), None, run_dir) as dep:
        assert dep.emulated and dep.served_model == "big"
        assert [_ask(dep.endpoint, m) for m in ("big", "small", "big")] == [200, 200, 200]
    kinds = [(e["kind"], e["subject"])
             for e in pq.read_table(run_dir / "events.parquet").to_pylist()]
    assert sorted(kinds[:2]) == [("model_load", "big"), ("model_load", "small")]
    assert kinds[2:] == [("model_sleep", "big"), ("model_wake", "small"),
                         ("model_sleep", "small"), ("model_wake", "big")]


def test_resident_models_are_served_by_the_emulator_itself(tmp_path):
    run_dir = tmp_path / "run-2"
    run_dir.mkdir()
    server = EmulatorModelServer(time_scale=0.001, cold_start_s=0.02)
    with server.deploy(_candidate(tmp_path, "resident"), None, run_dir) as dep:
        assert [_ask(dep.endpoint, m) for m in ("big", "small")] == [200, 200]
        assert "weights_load" in dep.phases
    kinds = sorted(e["kind"] for e in pq.read_table(run_dir / "events.parquet").to_pylist())
    assert kinds == ["model_load", "model_load"]
