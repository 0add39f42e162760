"""A reasoning model with speculative decoding, serving agentic sessions with an image, through
the real chain on the local profile: the candidate's keys reach the emulator, its scenario
reaches the load generator, and the derived metrics carry what each kind adds."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
from servingbench.pipelines.config import REPO
from servingbench.pipelines.profiles import Settings
from servingbench.resources.loadgen.generator import LoadGenerator

from tests.support.chain import materialized, run_job

CANDIDATE = (
    "{name: agent, instance_type: p5.48xlarge, model: meta-llama/Llama-4-Scout-17B-16E-Instruct, "
    "precision: bf16, tensor_parallel: 8, max_model_len: 16384, "
    "reasoning: {parser: deepseek_r1, emulated_tokens: [4, 12]}, "
    "speculative: {method: ngram, draft_tokens: 3, acceptance: 0.5}, "
    "scenario: {kind: agentic, turns: 4, max_context_tokens: 12000, tool_result_tokens: 512, "
    "input_tokens: 256, output_tokens: 24, images: 1, image_size: 512x512}, "
    f"price: {{region: us-east-1, purchase_option: on_demand, "
    f"sheet: {REPO / 'pipelines' / 'price_sheet.yaml'}}}}}"
)


def test_every_kind_through_the_chain(tmp_path):
    cands = tmp_path / "candidates.yaml"
    cands.write_text(f"candidates:\n  - {CANDIDATE}\n")
    # each step at least 3 s, so the 1 s telemetry samples see the draft counters move
    load = LoadGenerator(concurrency=(2,), requests_per_step=1000, duration_s=3,
                         warmup_requests=1)
    settings = Settings(data_dir=tmp_path, candidates_file=cands, time_scale=0.05,
                        cold_start_s=0.2, load=load)
    result, _ = run_job(tmp_path, candidate="agent", settings=settings)
    assert result.success, [e.event_specific_data.error.message for e in result.all_events
                            if e.is_step_failure]
    md = materialized(result)
    run_dir = tmp_path / "runs" / md["provisioned_cluster"]["run_dir"].rsplit("/", 1)[-1]
    deployment = json.loads((run_dir / "deployment.json").read_text())["config"]
    assert deployment["reasoning_tokens"] == [4, 12]
    assert deployment["speculative"] == {"draft_tokens": 3, "acceptance": 0.5}
    steady = pq.read_table(run_dir / "steady_state_request_log.parquet").to_pylist()
    assert {r["status"] for r in steady} == {"ok"}
    assert {r["input_images"] for r in steady} == {1}
    assert max(r["turn"] for r in steady) >= 1 and all(r["session_id"] for r in steady)
    assert all(4 <= r["reasoning_tokens"] <= 12 for r in steady)
    (m,) = pq.read_table(run_dir / "derived_metrics.parquet").to_pylist()
    assert m["reasoning_tokens"] == sum(r["reasoning_tokens"] for r in steady)
    assert m["ttfat_s_p50"] > m["ttft_s_p50"]
    telemetry = pq.read_table(run_dir / "telemetry.parquet").to_pylist()
    drafted = [r for r in telemetry if r["metric"] == "spec_draft_tokens"]
    assert drafted, sorted({r["metric"] for r in telemetry})
    assert m["spec_acceptance_rate"] is not None and 0 < m["spec_acceptance_rate"] < 1
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["scenario"]["kind"] == "agentic" and manifest["scenario"]["images"] == 1
    assert (run_dir / "ttft_by_context.parquet").exists()
