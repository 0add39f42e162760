"""`servingbench loadpod`, one pod of the load Job, as a real process: the load generator
against the fixed-timing server on 127.0.0.1, its records uploaded under the pod's shard
names to moto's S3 server — also when the load fails, and when a full disk (a real OS write
limit) stopped it: then its streams go up; bad input is exit 2 with the name."""

from __future__ import annotations

import datetime as dt
import os
import resource
import signal
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from servingbench.pipelines.cli import main as cli
from servingbench.resources.contract.schemas import PARTIAL_SUFFIX, SHARDED, read_records
from servingbench.resources.storage import runstore
from servingbench.resources.storage.board import Board

from tests.support.emulator import FIXED_MODEL

pytestmark = pytest.mark.slow  # a chain, a job or processes: not in `make check`

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def loadpod(args: list[str], index: str, preexec=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT, "JOB_COMPLETION_INDEX": index}
    return subprocess.run([sys.executable, "-m", "servingbench.pipelines.cli", "loadpod", *args],
                          capture_output=True, text=True, env=env, timeout=120,
                          preexec_fn=preexec)


def small_disk() -> None:
    """Every file the pod writes stops at 1 MiB (EFBIG, read by the writer as a full disk)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))


def test_a_pod_uploads_its_records_as_its_shards(server, s3_bucket, tmp_path):
    upload = f"{s3_bucket}/runs/run-7"
    p = loadpod(["--upload", upload, "--scratch", str(tmp_path / "scratch"), "--",
                 "--endpoint", server.base_url, "--model", FIXED_MODEL, "--concurrency", "2",
                 "--requests", "4", "--warmup-requests", "1", "--input-tokens", "8",
                 "--output-tokens", "4", "--run-id", "run-7", "--no-progress"], "3")
    assert p.returncode == 0, p.stderr
    got = runstore.get(upload, ["steady_state_request_log.pod-3.parquet", "chunk_log.pod-3.parquet",
                                "warmup_log.pod-3.parquet", "worker.pod-3.json"],
                       tmp_path / "back")
    assert len(got) == 4
    steady = pq.read_table(tmp_path / "back" / "steady_state_request_log.pod-3.parquet")
    assert steady.num_rows == 4 and set(steady["run_id"].to_pylist()) == {"run-7"}
    # nothing is published: the pipeline writes the marker when the whole run is there
    assert not runstore.is_complete(upload)


def test_a_failed_load_still_uploads_and_fails_the_pod(s3_bucket, tmp_path):
    upload = f"{s3_bucket}/runs/run-8"
    p = loadpod(["--upload", upload, "--scratch", str(tmp_path / "s"), "--",
                 "--endpoint", "http://127.0.0.1:9", "--model", "m", "--run-id", "run-8"], "0")
    assert p.returncode == 2 and "servingbench load: error" in p.stderr
    assert "loadpod pod-0: uploaded" in p.stderr


def test_bad_input_is_exit_2_naming_it(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("JOB_COMPLETION_INDEX", raising=False)
    assert cli(["loadpod", "--upload", "s3://b/p/runs/x", "--scratch", str(tmp_path / "s"),
                "--", "--endpoint", "http://127.0.0.1:9", "--model", "m"]) == 2
    assert "JOB_COMPLETION_INDEX=''" in capsys.readouterr().err
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "0")
    assert cli(["loadpod", "--upload", "/tmp/runs/x", "--scratch", str(tmp_path / "s"),
                "--", "--endpoint", "http://127.0.0.1:9", "--model", "m"]) == 2
    assert "--upload '/tmp/runs/x': expected s3://" in capsys.readouterr().err


def test_a_pod_stopped_by_a_full_disk_says_so_and_uploads_its_streams(server, s3_bucket, tmp_path):
    upload = f"{s3_bucket}/runs/run-9"
    # pod-0 is gone before pod-1 starts (what a pod that stopped writes): at the meeting
    # before the steady step pod-1 waits for no one and goes on alone to fill its disk. No
    # deadline is within reach (a pod up to 60 s past the instant runs, the meeting closes
    # 1,800 s after the warm-up began) and nothing compares measured times: not serial.
    Board(f"{upload}/barrier").put("gone/0.pod-0", b"")
    start = dt.datetime.now(dt.UTC).isoformat()
    p = loadpod(["--upload", upload, "--scratch", str(tmp_path / "scratch"), "--",
                 "--endpoint", server.base_url, "--model", FIXED_MODEL, "--concurrency", "8",
                 "--requests", "1000000", "--warmup-requests", "2", "--input-tokens", "8",
                 "--output-tokens", "64", "--no-tokenize", "--run-id", "run-9", "--no-progress",
                 "--drain-timeout", "5", "--worker-index", "env", "--worker-count", "2",
                 "--start-at", start], "1", small_disk)
    assert p.returncode == 74, p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    assert "disk full: cannot write" in p.stderr and "File too large" in p.stderr
    streams = [f"{name}.pod-1{PARTIAL_SUFFIX}" for name in SHARDED]
    assert runstore.get(upload, streams, tmp_path / "back") == streams, p.stderr[-3000:]
    # what went up is what the pod kept: the message's counts are the rows read back
    steady = read_records(tmp_path / "back", "steady_state_request_log")
    chunks = read_records(tmp_path / "back", "chunk_log")
    assert steady.num_rows > 0 and set(steady["worker"].to_pylist()) == {"pod-1"}
    assert f"{steady.num_rows} steady_state_request_log" in p.stderr
    assert f"{chunks.num_rows} chunk_log" in p.stderr
    # it met (alone) before the steady step, which its disk then cut short
    assert [k.split(".")[1] for k in Board(f"{upload}/barrier").names("001-c=8")] == ["pod-1"]


def test_a_pod_runs_the_config_under_its_upload_prefix_and_names_a_missing_one(
        server, s3_bucket, tmp_path):
    from servingbench.resources.loadgen import config_file
    from servingbench.resources.loadgen.config import LoadConfig

    upload = f"{s3_bucket}/runs/run-c"
    missing = loadpod(["--upload", upload, "--scratch", str(tmp_path / "s0"), "--config",
                       "load_config.json", "--", "--no-progress"], "0")
    assert missing.returncode == 2
    assert "--config load_config.json: cannot read it under" in missing.stderr
    cfg = LoadConfig(server.base_url, FIXED_MODEL, concurrency=[2], requests_per_step=4,
                     warmup_requests=1, input_tokens=8, output_tokens=4, run_id="run-c")
    config_file.write(cfg, tmp_path / "load_config.json")
    runstore.put(tmp_path, upload, {"load_config.json": "load_config.json"})
    p = loadpod(["--upload", upload, "--scratch", str(tmp_path / "s1"), "--config",
                 "load_config.json", "--", "--no-progress"], "0")
    assert p.returncode == 0, p.stderr
    got = runstore.get(upload, ["steady_state_request_log.pod-0.parquet"], tmp_path / "back")
    steady = pq.read_table(tmp_path / "back" / got[0])
    assert steady.num_rows == 4 and set(steady["run_id"].to_pylist()) == {"run-c"}
