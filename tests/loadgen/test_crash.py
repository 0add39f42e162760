"""kill -9 mid-run keeps every completed request readable; a run is never overwritten."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from pyarrow.parquet import read_table as read_parquet
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.schemas import SchemaError, read_records
from servingbench.resources.loadgen import RunExistsError, run_load

from tests.support.emulator import FIXED_MODEL
from tests.support.loadgen import ROOT, config, ns

pytestmark = pytest.mark.slow  # a chain, a job or processes: not in `make check`


def _steady_rows(run_dir) -> int:
    try:
        t = read_records(run_dir, "steady_state_request_log")
    except SchemaError:
        return 0
    return 0 if t is None else t.num_rows


def test_kill_9_mid_run_leaves_completed_requests_intact(start_server, tmp_path):
    srv = start_server(ttft_ms=10, itl_ms=5)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "servingbench.pipelines.cli", "load", "--endpoint", srv.base_url, "--model", FIXED_MODEL,
         "--out", str(run_dir), "--concurrency", "2", "--requests", "400", "--warmup-requests", "2",
         "--input-tokens", "16", "--output-tokens", "20", "--no-progress"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90
        while _steady_rows(run_dir) < 6:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "no steady rows flushed within 90 s"
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not (run_dir / "steady_state_request_log.parquet").exists()  # it really died mid-run
    steady = read_records(run_dir, "steady_state_request_log").to_pylist()
    assert 6 <= len(steady) < 400
    truth = srv.truth()
    chunks = read_records(run_dir, "chunk_log").to_pylist()
    sums: dict[str, int] = {}
    for c in chunks:
        sums[c["request_id"]] = sums.get(c["request_id"], 0) + c["tokens"]
    for r in steady:
        assert r["status"] == "ok" and r["output_tokens"] == 20 and r["chunks"] == 20
        assert ns(r["sent_at"]) <= ns(r["first_token_at"]) <= ns(r["last_token_at"]) <= ns(r["finished_at"])
        assert truth[r["request_id"]]["completion_tokens"] == 20
        assert sums[r["request_id"]] == 20  # chunks are flushed before their request row
    m = mf.load(run_dir / "manifest.json")  # a valid manifest was written before the kill
    assert m["phases"]["steady"]["ended_at"] is None and m["source"] == "emulated"
    analysis = analyze_run(run_dir)  # the analyzer reads the partial streams as they are
    assert analysis.exit_code == 0, analysis.failed_rules
    metrics = read_parquet(run_dir / "derived_metrics.parquet").to_pylist()
    assert [(x["step"], x["n_requests"], x["n_ok"]) for x in metrics] == [("c=2", len(steady), len(steady))]


def test_a_rerun_never_overwrites_a_run(server, tmp_path):
    run_load(config(server.base_url), tmp_path / "run", progress=False)
    before = (tmp_path / "run" / "steady_state_request_log.parquet").read_bytes()
    with pytest.raises(RunExistsError, match="never overwritten"):
        run_load(config(server.base_url), tmp_path / "run", progress=False)
    assert (tmp_path / "run" / "steady_state_request_log.parquet").read_bytes() == before


def test_a_partial_run_is_not_overwritten_either(server, tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "chunk_log.partial.arrows").write_bytes(b"left by a killed run")
    with pytest.raises(RunExistsError):
        run_load(config(server.base_url), tmp_path / "run", progress=False)
    assert (tmp_path / "run" / "chunk_log.partial.arrows").read_bytes() == b"left by a killed run"
