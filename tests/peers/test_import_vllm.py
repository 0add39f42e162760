"""`servingbench import vllm`: a `vllm bench serve --save-result --save-detailed` result.

vLLM is too heavy to install here, so its result is a fixture in the layout
vllm/benchmarks/serve.py writes, naming its version the documented way
(`--metadata vllm_version=0.33.0` puts the key at the top level): 4 requests at
--max-concurrency 2, 20 ms to the first token, 5 ms between tokens, the third failed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from servingbench.pipelines.cli import main as cli
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.contract import manifest as mf

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "peers" / "vllm_bench_serve_0.33.0.json"
MS = 1_000_000


def ns_rows(path: Path) -> list[dict]:
    t = pq.read_table(path)
    t = pa.table({f.name: (t[f.name].cast(pa.int64()) if pa.types.is_timestamp(f.type)
                           else t[f.name]) for f in t.schema})
    return t.to_pylist()


def test_vllm_result_becomes_a_run_folder_the_analyzer_accepts(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    anchor = "2026-11-30T18:00:00Z"
    assert cli(["import", "vllm", str(FIXTURE), "--out", str(out), "--anchor", anchor]) == 0
    m = mf.load(out / "manifest.json")
    assert m["source"] == "emulated"
    assert m["import"]["peer"] == "vllm" and m["import"]["peer_version"] == "0.33.0"
    assert m["import"]["chunk_times"] == "reconstructed_from_itl"
    assert m["steps"][0]["step"] == "c=2" and m["steps"][0]["target"] == 2.0
    assert m["model"] == "fixed"
    rows = {r["request_id"]: r for r in ns_rows(out / "steady_state_request_log.parquet")}
    t0 = mf.parse_ts(anchor)
    first = rows["vllm-0"]
    # start_times 1000.000 is the anchor; TTFT 20 ms; three gaps of 5 ms after it
    assert first["sent_at"] == t0
    assert first["first_token_at"] - first["sent_at"] == 20 * MS
    assert first["last_token_at"] - first["first_token_at"] == 15 * MS
    assert first["finished_at"] == first["last_token_at"]  # vLLM keeps no stream close
    assert first["output_tokens"] == 4 and first["output_tokens_source"] == "itl"
    assert rows["vllm-1"]["sent_at"] - t0 == 10 * MS
    assert rows["vllm-3"]["scheduled_at"] == rows["vllm-3"]["sent_at"] - 1 * MS  # queue_times
    failed = rows["vllm-2"]
    assert failed["status"] == "http_error" and failed["error"] == "Service Unavailable"
    assert failed["first_token_at"] is None and failed["output_tokens"] is None
    chunks = [c for c in ns_rows(out / "chunk_log.parquet") if c["request_id"] == "vllm-1"]
    assert [c["at"] - rows["vllm-1"]["sent_at"] for c in chunks] == [21 * MS, 26 * MS, 32 * MS, 36 * MS]
    result = analyze_run(out)
    assert result.exit_code == 0, result.message
    metrics = result.metrics.to_pylist()[0]
    assert metrics["n_requests"] == 4 and metrics["n_ok"] == 3
    assert metrics["ttft_s_p50"] == pytest.approx(0.021)
    printed = capsys.readouterr().out
    assert "imported vllm 0.33.0: 4 steady requests" in printed


def test_without_an_anchor_the_file_date_places_the_run_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert cli(["import", "vllm", str(FIXTURE), "--out", str(out)]) == 0
    m = mf.load(out / "manifest.json")
    assert any("`date` 20261130-180000 read as UTC" in n for n in m["import"]["notes"])
    rows = ns_rows(out / "steady_state_request_log.parquet")
    # the last chunk of the run falls at the file's date
    assert max(r["last_token_at"] or 0 for r in rows) == mf.parse_ts("2026-11-30T18:00:00Z")


def test_a_summary_that_disagrees_with_its_records_is_noted(tmp_path: Path) -> None:
    doc = json.loads(FIXTURE.read_text())
    doc["mean_ttft_ms"] = 30.0
    doc["total_output_tokens"] = 13
    src = tmp_path / "edited.json"
    src.write_text(json.dumps(doc))
    assert cli(["import", "vllm", str(src), "--out", str(tmp_path / "run")]) == 0
    notes = mf.load(tmp_path / "run" / "manifest.json")["import"]["notes"]
    assert any("ttft_ms_mean 30" in n and "records give 21" in n for n in notes), notes
    assert any("output_tokens 13" in n and "records give 12" in n for n in notes), notes


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.pop("itls"), "result.itls: missing"),
    (lambda d: d["ttfts"].pop(), "result.ttfts: 3 entries, but start_times has 4"),
    (lambda d: d["start_times"].__setitem__(1, "soon"), "result[1].start_times: expected a number"),
    (lambda d: d.__setitem__("vllm_version", 33), "result.vllm_version: expected a string"),
    (lambda d: d.__setitem__("completed", "3"), "result.completed: expected int"),
])
def test_a_malformed_result_exits_2_naming_file_and_field(tmp_path: Path, capsys, edit, field) -> None:
    doc = json.loads(FIXTURE.read_text())
    edit(doc)
    src = tmp_path / "bad.json"
    src.write_text(json.dumps(doc))
    assert cli(["import", "vllm", str(src), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert str(src) in err and field in err, err
    assert not (tmp_path / "run").exists()


def test_a_truncated_result_exits_2(tmp_path: Path, capsys) -> None:
    src = tmp_path / "cut.json"
    src.write_bytes(FIXTURE.read_bytes()[:700])
    assert cli(["import", "vllm", str(src), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert str(src) in err and "cut short" in err


def test_an_existing_run_folder_is_never_overwritten(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "manifest.json").write_text("{}")
    assert cli(["import", "vllm", str(FIXTURE), "--out", str(out)]) == 2
    assert "never overwrites" in capsys.readouterr().err
    assert (out / "manifest.json").read_text() == "{}"


def test_the_manifest_from_a_run_gives_candidate_scope_and_source(tmp_path: Path) -> None:
    base = mf.empty("own-run", "measured", mf.parse_ts("2026-11-30T17:00:00Z"))
    base.update(candidate="p5-scout-bf16-tp8", instance_type="p5.48xlarge", node_count=1,
                region="us-east-1", account_id="123456789012", accelerator="H100",
                accelerators_per_node=8)
    mf.dump(base, tmp_path / "manifest.json")
    shutil.copy(FIXTURE, tmp_path / "result.json")
    out = tmp_path / "run"
    assert cli(["import", "vllm", str(tmp_path / "result.json"), "--out", str(out),
                "--manifest-from", str(tmp_path / "manifest.json"), "--run-id", "vllm-import-1"]) == 0
    m = mf.load(out / "manifest.json")
    assert (m["run_id"], m["source"], m["candidate"], m["instance_type"]) == (
        "vllm-import-1", "measured", "p5-scout-bf16-tp8", "p5.48xlarge")
    assert (m["accelerator"], m["accelerators_per_node"]) == ("H100", 8)
    assert m["phases"]["steady"]["started_at"] != base["created_at"]  # the peer's times, not its


def test_a_listed_candidate_fills_the_manifest_and_an_unlisted_one_only_names_it(tmp_path, capsys) -> None:
    out = tmp_path / "listed"
    assert cli(["import", "vllm", str(FIXTURE), "--out", str(out),
                "--candidate", "p5-scout-bf16-tp8", "--region", "us-east-1"]) == 0
    m = mf.load(out / "manifest.json")
    assert (m["candidate"], m["instance_type"], m["tensor_parallel"], m["region"]) == (
        "p5-scout-bf16-tp8", "p5.48xlarge", 8, "us-east-1")
    assert m["model"] == "meta-llama/Llama-4-Scout-17B-16E-Instruct"  # the candidate's, not vLLM's id
    out = tmp_path / "unlisted"
    assert cli(["import", "vllm", str(FIXTURE), "--out", str(out), "--candidate", "my-box",
                "--instance-type", "g6e.xlarge", "--node-count", "2"]) == 0
    m = mf.load(out / "manifest.json")
    assert (m["candidate"], m["instance_type"], m["node_count"], m["model"]) == (
        "my-box", "g6e.xlarge", 2, "fixed")
    assert "not in" in capsys.readouterr().err


def test_anchor_is_refused_for_a_peer_that_keeps_wall_clock_times(tmp_path, capsys) -> None:
    assert cli(["import", "aiperf", str(tmp_path), "--out", str(tmp_path / "run"),
                "--anchor", "2026-11-30T18:00:00Z"]) == 2
    assert "--anchor: only for inference-perf and vllm" in capsys.readouterr().err


def test_analyze_flag_runs_the_analyzer_and_returns_its_status(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    assert cli(["import", "vllm", str(FIXTURE), "--out", str(out), "--analyze"]) == 0
    assert (out / "gates.json").exists() and (out / "derived_metrics.parquet").exists()
