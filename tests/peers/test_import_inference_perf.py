"""`servingbench import inference-perf` on the reports the installed inference-perf 0.7.0
wrote (per-request lifecycle metrics on), run against the emulator's fixed-timing server
on 127.0.0.1. Skips when `make peers` has not installed it (it needs Python >= 3.12)."""

from __future__ import annotations

import json
import shutil
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from servingbench.pipelines.cli import main as cli
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.contract import manifest as mf

from tests.support import peers
from tests.support.emulator import FixedTimingServer

REQUESTS, OUTPUT = 6, 8

# each module runs its peer once (a minute or more on a busy machine): slow, and given the
# time the peer's own run takes
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> Path:
    py = peers.require("inference-perf")
    tmp = tmp_path_factory.mktemp("inference-perf")
    server = FixedTimingServer(tmp, ttft_ms=20, itl_ms=5)
    try:
        tok = peers.tokenizer(py, tmp / "tokenizer")
        return peers.run_inference_perf(py, server.base_url, tmp / "reports", tok,
                                        concurrency=2, requests=REQUESTS, output_tokens=OUTPUT)
    finally:
        server.stop()


def ns(t: float) -> int:
    """A float of seconds as integer ns, exactly (the float's own binary value)."""
    return round(Decimal(t) * 10**9)


def ns_rows(path: Path) -> list[dict]:
    t = pq.read_table(path)
    return pa.table({f.name: (t[f.name].cast(pa.int64()) if pa.types.is_timestamp(f.type)
                              else t[f.name]) for f in t.schema}).to_pylist()


def test_inference_perf_reports_become_a_run_folder_the_analyzer_accepts(reports, tmp_path) -> None:
    out = tmp_path / "run"
    assert cli(["import", "inference-perf", str(reports), "--out", str(out)]) == 0
    m = mf.load(out / "manifest.json")
    assert m["import"]["peer"] == "inference-perf" and m["import"]["chunk_times"] == "recorded"
    assert [s["step"] for s in m["steps"]] == ["c=2"] and m["model"] == "fixed"
    theirs = json.loads((reports / "per_request_lifecycle_metrics.json").read_text())
    steady = sorted(ns_rows(out / "steady_state_request_log.parquet"), key=lambda r: r["sent_at"])
    assert len(steady) == len(theirs) == REQUESTS
    first = min(theirs, key=lambda e: e["start_time"])
    zero = steady[0]["sent_at"] - ns(first["start_time"])
    chunks = ns_rows(out / "chunk_log.parquet")
    for e in theirs:
        r = next(x for x in steady if x["sent_at"] == zero + ns(e["start_time"]))
        times = e["info"]["response_metrics"]["chunk_times"]
        assert r["finished_at"] == zero + ns(e["end_time"])
        assert sorted(c["at"] for c in chunks if c["request_id"] == r["request_id"]) == [
            zero + ns(t) for t in times]
        assert r["output_tokens"] == OUTPUT and r["output_tokens_source"] == "usage"
    result = analyze_run(out)
    assert result.exit_code == 0, result.message
    assert result.metrics.to_pylist()[0]["n_ok"] == REQUESTS


def test_an_anchor_places_the_first_request(reports, tmp_path) -> None:
    out = tmp_path / "run"
    assert cli(["import", "inference-perf", str(reports), "--out", str(out),
                "--anchor", "2026-11-30T18:00:00Z"]) == 0
    steady = ns_rows(out / "steady_state_request_log.parquet")
    assert min(r["sent_at"] for r in steady) == mf.parse_ts("2026-11-30T18:00:00Z")


@pytest.mark.parametrize("damage, expect", [
    ("cut", "per_request_lifecycle_metrics.json: not JSON, or cut short"),
    ("version", "version: 0.1.0, this reader knows"),
    ("field", "requests[0].start_time: expected a number"),
])
def test_damaged_or_other_version_reports_exit_2(reports, tmp_path, capsys, damage, expect) -> None:
    src = tmp_path / "damaged"
    shutil.copytree(reports, src)
    per_request = src / "per_request_lifecycle_metrics.json"
    if damage == "cut":
        per_request.write_bytes(per_request.read_bytes()[:300])
    elif damage == "version":
        stage = src / "inference-perf.partial.stage_0.yaml"
        stage.write_text(stage.read_text().replace("version: 0.2.1", "version: 0.1.0", 1))
    else:
        doc = json.loads(per_request.read_text())
        doc[0]["start_time"] = "early"
        per_request.write_text(json.dumps(doc))
    assert cli(["import", "inference-perf", str(src), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert str(src) in err and expect in err, err
