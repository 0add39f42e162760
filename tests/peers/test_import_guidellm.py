"""`servingbench import guidellm` on the benchmarks.json the installed guidellm 0.8.1 wrote,
run against the emulator's fixed-timing server on 127.0.0.1. Skips when `make peers` has
not installed it. guidellm runs once per module (it takes about a minute here)."""

from __future__ import annotations

import json
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
def report(tmp_path_factory) -> tuple[Path, int]:
    py = peers.require("guidellm")
    tmp = tmp_path_factory.mktemp("guidellm")
    server = FixedTimingServer(tmp, ttft_ms=20, itl_ms=5)
    try:
        tok = peers.tokenizer(py, tmp / "tokenizer", byte_level=True)
        path = peers.run_guidellm(py, server.base_url, tmp / "out", tok, concurrency=2,
                                  requests=REQUESTS, output_tokens=OUTPUT)
        served = len(server.truth_rows())
    finally:
        server.stop()
    return path, served


def ns(t: float) -> int:
    """A float of seconds as integer ns, exactly (the float's own binary value)."""
    return round(Decimal(t) * 10**9)


def ns_rows(path: Path) -> list[dict]:
    t = pq.read_table(path)
    return pa.table({f.name: (t[f.name].cast(pa.int64()) if pa.types.is_timestamp(f.type)
                              else t[f.name]) for f in t.schema}).to_pylist()


def test_guidellm_report_becomes_a_run_folder_the_analyzer_accepts(report, tmp_path) -> None:
    path, served = report
    out = tmp_path / "run"
    assert cli(["import", "guidellm", str(path), "--out", str(out)]) == 0
    m = mf.load(out / "manifest.json")
    assert (m["import"]["peer"], m["import"]["peer_version"]) == ("guidellm", "0.8.1")
    assert m["import"]["chunk_times"] == "first_and_last"
    assert [s["step"] for s in m["steps"]] == ["c=2"] and m["model"] == "fixed"
    steady = ns_rows(out / "steady_state_request_log.parquet")
    assert len(steady) == REQUESTS == served
    doc = json.loads(path.read_text())
    theirs = {r["request_id"]: r for r in doc["benchmarks"][0]["requests"]["successful"]}
    chunks = ns_rows(out / "chunk_log.parquet")
    for r in steady:
        t = theirs[r["request_id"]]["info"]["timings"]
        assert r["sent_at"] == ns(t["request_start"])
        assert r["first_token_at"] == ns(t["first_token_iteration"])
        assert r["last_token_at"] == ns(t["last_token_iteration"])
        assert r["scheduled_at"] == ns(t["targeted_start"])
        assert r["output_tokens"] == OUTPUT and r["output_tokens_source"] == "first_last"
        mine = sorted((c["seq"], c["at"], c["tokens"]) for c in chunks
                      if c["request_id"] == r["request_id"])
        assert mine == [(0, r["first_token_at"], 1), (1, r["last_token_at"], OUTPUT - 1)]
    result = analyze_run(out)
    assert result.exit_code == 0, result.message
    row = result.metrics.to_pylist()[0]
    # ITL over the chunk log is guidellm's own (last - first) / (tokens - 1), its mean
    own = doc["benchmarks"][0]["metrics"]["inter_token_latency_ms"]["successful"]["mean"]
    assert row["itl_s_mean"] * 1e3 == pytest.approx(own, rel=1e-6)
    assert row["itl_multi_token_share"] == 1.0  # and the analyzer says how coarse it is


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["metadata"].__setitem__("version", 1), "report.metadata.version: 1"),
    (lambda d: d["benchmarks"][0]["requests"]["successful"][0]["info"]["timings"]
     .__setitem__("request_start", "now"),
     "report.benchmarks[0].requests.successful[0].info.timings.request_start: expected"),
    (lambda d: d["benchmarks"][0]["config"]["strategy"].pop("streams"),
     "report.benchmarks[0].config.strategy.streams: missing"),
])
def test_a_malformed_or_other_version_report_exits_2(report, tmp_path, capsys, edit, field) -> None:
    path, _ = report
    doc = json.loads(path.read_text())
    edit(doc)
    bad = tmp_path / "benchmarks.json"
    bad.write_text(json.dumps(doc))
    assert cli(["import", "guidellm", str(bad), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and field in err, err


def test_a_truncated_report_exits_2(report, tmp_path, capsys) -> None:
    path, _ = report
    bad = tmp_path / "benchmarks.json"
    bad.write_bytes(path.read_bytes()[:5000])
    assert cli(["import", "guidellm", str(bad), "--out", str(tmp_path / "run")]) == 2
    assert "cut short" in capsys.readouterr().err
