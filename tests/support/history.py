"""The `good` fixture's history for the report asset and the nightly regression check:
earlier runs of its candidate (manifest + headline) and a recording with engine counters."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.contract import manifest as mf

from tests.support.chain import FIXTURES


def analyzed_good(root: Path) -> Path:
    """A copy of the `good` fixture as the replayed run analyses it (same analyzer, same SLO)."""
    src = root / "good"
    shutil.copytree(FIXTURES / "good", src)
    analyze_run(src, slos=[(2.0, 0.1)])
    return src


def write_history(runs_dir: Path, headline: pa.Table, factors: list[float]) -> list[str]:
    """Earlier runs of the candidate: manifest + headline, throughput x factor and cost / factor."""
    base = mf.load(FIXTURES / "good" / "manifest.json")
    ids = []
    for day, f in enumerate(factors, start=20):
        run_id = f"history-{day}"
        d = runs_dir / run_id
        d.mkdir(parents=True)
        mf.dump(dict(base, run_id=run_id, created_at=f"2026-11-{day}T02:00:00.000000000Z"),
                d / "manifest.json")
        row = headline.to_pylist()[0]
        row.update(run_id=run_id, output_tok_s=row["output_tok_s"] * f,
                   cost_per_1m_output_usd=row["cost_per_1m_output_usd"] / f)
        pq.write_table(pa.Table.from_pylist([row], schema=headline.schema), d / "headline.parquet")
        ids.append(run_id)
    return ids


def recording_with_server_metrics(tmp_path: Path) -> Path:
    """The `good` fixture plus recorded engine counters: 12 generated tokens where the
    client counted 9 (a deliberately wrong server count) for its only step, c=2."""
    rec = tmp_path / "recording"
    shutil.copytree(FIXTURES / "good", rec)
    step = {"step": "c=2", "steps": ["c=2"], "available": True, "reason": None,
            "counter_reset": False, "generation_tokens": 12.0, "prompt_tokens": 48.0,
            "ttft_count": 3.0, "ttft_sum": 0.3, "request_success": {"stop": 0.0, "length": 3.0},
            "requests_finished": 3.0, "requests_ok": 3.0,
            "ttft_buckets": [["0.1", 1.0], ["0.25", 3.0], ["+Inf", 3.0]]}
    (rec / "server_metrics.json").write_text(json.dumps(
        {"schema_version": 1, "endpoint": "http://127.0.0.1:1/metrics", "available": True,
         "reason": None, "emulated": True, "steps": [step]}))
    return rec


def regression_check(result):
    """The nightly regression check's evaluation in a job result, and its metadata."""
    (ev,) = [e.event_specific_data for e in result.all_events
             if e.event_type_value == "ASSET_CHECK_EVALUATION"
             and e.event_specific_data.check_name == "headline_has_not_regressed"]
    return ev, {k: v.value for k, v in ev.metadata.items()}
