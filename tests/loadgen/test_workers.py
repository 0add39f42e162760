"""Several load workers against the emulator (fixed timing) as a real process on 127.0.0.1:
two worker processes send what one sends (same requests, statuses, schedule and step
metrics), every row says which worker sent it, a worker killed mid-step leaves its records
readable and is named, a folder of shards alone reads like the merged one, and bad flags
exit 2 naming the flag."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import httpx
import psutil
import pyarrow.parquet as pq
import pytest
from servingbench.emulator import process
from servingbench.pipelines.cli import load as load_cli
from servingbench.pipelines.cli import main as cli
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.schemas import SchemaError, read_records
from servingbench.resources.loadgen import LoadConfigError, run_load
from servingbench.resources.loadgen.workers.shards import merge_shards
from servingbench.resources.loadgen.workers.share import Share

from tests.support.loadgen import ROOT, config, ns, rows

pytestmark = pytest.mark.slow  # a chain, a job or processes: not in `make check`

TTFT_MS = 50


@pytest.fixture(scope="module")
def emu():
    with process.EmulatorProcess(["--fixed-timing", f"{TTFT_MS}:2", "--cold-start-s", "0"]) as e:
        e.model = httpx.get(f"{e.base_url}/v1/models").json()["data"][0]["id"]
        yield e


def _cfg(emu, **kw):
    args = dict(model=emu.model, concurrency=[4], rates=[20.0], arrival="constant",
                requests_per_step=16, warmup_requests=2, output_tokens=8)
    args.update(kw)
    return config(emu.base_url, **args)


def _by_step(run_dir) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows(run_dir):
        out.setdefault(r["step"], []).append(r)
    return out


def _offsets(step_rows: list[dict]) -> list[float]:
    t0 = min(ns(r["scheduled_at"]) for r in step_rows)
    return sorted((ns(r["scheduled_at"]) - t0) / 1e9 for r in step_rows)


def test_share_splits_slots_counts_and_arrivals():
    two = [Share(0, 2), Share(1, 2)]
    assert [s.concurrency(5) for s in two] == [3, 2]
    assert [s.concurrency(1) for s in two] == [1, 0]  # fewer slots than workers: w1 sits out
    assert [s.requests(64, 5) for s in two] == [39, 25]  # in proportion to the slots
    assert [s.requests(3, 1) for s in two] == [3, 0]
    assert sorted(two[0].deal(range(7)) + two[1].deal(range(7))) == list(range(7))
    with pytest.raises(ValueError):
        Share(2, 2)


@pytest.mark.serial  # measured TTFT within 20 ms of the server's
def test_two_workers_send_what_one_sends(emu, tmp_path):
    one = run_load(_cfg(emu), tmp_path / "one", progress=False)
    two = run_load(_cfg(emu, workers=2), tmp_path / "two", progress=False)
    assert two.n_requests == one.n_requests == 32 and two.n_warmup == one.n_warmup == 2
    assert two.statuses == one.statuses == {"ok": 32}
    assert [w["status"] for w in two.workers] == ["ok", "ok"]
    # one merged file per log, no shard left behind
    names = sorted(os.listdir(tmp_path / "two"))
    assert not [n for n in names if ".w" in n], names
    # §6: the merged file lists the shard files it holds, by name
    assert pq.read_schema(tmp_path / "two" / "chunk_log.parquet").metadata[
        b"servingbench.merged_shards"] == b"chunk_log.w0.parquet,chunk_log.w1.parquet"
    steady, warm = rows(tmp_path / "two"), rows(tmp_path / "two", "warmup_log")
    assert len({r["request_id"] for r in steady + warm}) == 34
    assert {r["worker"] for r in steady} == {"w0", "w1"} and None not in {r["worker"] for r in warm}
    chunks = read_records(tmp_path / "two", "chunk_log").to_pylist()
    assert {c["request_id"] for c in chunks} == {r["request_id"] for r in steady + warm}
    a, b = _by_step(tmp_path / "one"), _by_step(tmp_path / "two")
    assert {k: len(v) for k, v in a.items()} == {k: len(v) for k, v in b.items()} == {"c=4": 16, "rate=20": 16}
    # c=4 over two workers is 2 + 2 slots, 8 requests each
    assert sorted(r["worker"] for r in b["c=4"]).count("w0") == 8
    # open loop: the union of the two workers' arrivals is the one-worker schedule (every
    # 50 ms), started at one instant; a wrong deal or start would be off by >= 50 ms
    for x, y in zip(_offsets(a["rate=20"]), _offsets(b["rate=20"]), strict=True):
        assert abs(x - y) < 0.002
    w0 = [r for r in b["rate=20"] if r["worker"] == "w0"]
    assert len(w0) == 8
    # the same step metrics: counts exactly, TTFT (50 ms by construction) alike
    m1, m2 = analyze_run(tmp_path / "one"), analyze_run(tmp_path / "two")
    assert m1.exit_code != 2 and m2.exit_code != 2, (m1.message, m2.message)
    r1 = {r["step"]: r for r in m1.metrics.to_pylist()}
    r2 = {r["step"]: r for r in m2.metrics.to_pylist()}
    assert r1.keys() == r2.keys() == {"c=4", "rate=20"}
    for step in r1:
        for key in ("n_requests", "n_ok", "output_tokens", "input_tokens", "ttft_s_n"):
            assert r1[step][key] == r2[step][key], (step, key)
        assert r2[step]["ttft_s_p50"] == pytest.approx(TTFT_MS / 1e3, abs=0.02)
        assert r1[step]["ttft_s_p50"] == pytest.approx(r2[step]["ttft_s_p50"], abs=0.02)
    assert r2["c=4"]["achieved_concurrency"] == pytest.approx(r1["c=4"]["achieved_concurrency"], rel=0.25)
    m = mf.load(tmp_path / "two" / "manifest.json")
    assert [s["step"] for s in m["steps"]] == ["c=4", "rate=20"]
    assert m["workers"] == [{"name": "w0", "status": "ok", "reason": None},
                            {"name": "w1", "status": "ok", "reason": None}]
    assert m["scenario"]["workers"] == 2
    server = json.loads((tmp_path / "two" / "server_metrics.json").read_text())
    assert [s["step"] for s in server["steps"]] == ["c=4", "rate=20"]  # scraped once per step


def test_multi_turn_sessions_are_dealt_to_workers(emu, tmp_path):
    from servingbench.resources.loadgen.scenarios.spec import Scenario

    cfg = _cfg(emu, concurrency=[2], rates=[], requests_per_step=6, warmup_requests=0, workers=2,
               scenario=Scenario("multi_turn", turns=3, think_time_s=0.0))
    run_load(cfg, tmp_path / "run", progress=False)
    sessions: dict[str, set] = {}
    for r in rows(tmp_path / "run"):
        sessions.setdefault(r["session_id"], set()).add(r["worker"])
    assert len(sessions) == 2 and all(len(w) == 1 for w in sessions.values())
    assert set().union(*sessions.values()) == {"w0", "w1"}


def test_trace_rows_are_dealt_to_workers_on_the_trace_times(emu, tmp_path):
    from pathlib import Path

    from servingbench.resources.loadgen.scenarios.spec import Scenario
    from servingbench.resources.loadgen.scenarios.trace import read_trace

    trace = Path(ROOT) / "pipelines" / "traces" / "mooncake_small.jsonl"
    cfg = _cfg(emu, concurrency=[], rates=[], warmup_requests=0, workers=2,
               scenario=Scenario("trace", trace=trace, trace_format="mooncake", speedup=2.0))
    run_load(cfg, tmp_path / "run", progress=False)
    got = sorted(rows(tmp_path / "run"), key=lambda r: ns(r["scheduled_at"]))
    want = read_trace(trace, "mooncake")
    assert len(got) == len(want) and {r["status"] for r in got} == {"ok"}
    # row i went to worker i mod 2, and at the trace's own (scaled) time on one clock
    assert [r["worker"] for r in got] == [f"w{i % 2}" for i in range(len(want))]
    t0 = ns(got[0]["scheduled_at"])
    for r, w in zip(got, want, strict=True):
        expect = int(w.at_ns / 2.0) - int(want[0].at_ns / 2.0)
        assert abs(ns(r["scheduled_at"]) - t0 - expect) < 2_000_000
        assert r["input_tokens"] == w.input_tokens and r["output_tokens"] == w.output_tokens


def test_batch_and_slo_search_refuse_workers(emu):
    from servingbench.resources.loadgen.scenarios.spec import Scenario

    with pytest.raises(LoadConfigError, match="workers: scenario batch runs with one worker"):
        _cfg(emu, workers=2, scenario=Scenario("batch", requests=4, max_in_flight=2))


def _cli(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "servingbench.pipelines.cli", "load", *args], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _worker_pid(parent: int, shard: str, deadline: float) -> int:
    """The worker process that holds `shard` open (its own stream file)."""
    while time.monotonic() < deadline:
        for child in psutil.Process(parent).children():
            try:
                if any(f.path.endswith(shard) for f in child.open_files()):
                    return child.pid
            except psutil.Error:
                pass
        time.sleep(0.2)
    raise AssertionError(f"no worker holds {shard}")


def _rows_of(run_dir, worker: str) -> int:
    try:
        t = read_records(run_dir, "steady_state_request_log")
    except SchemaError:
        return 0
    return 0 if t is None else sum(1 for w in t.column("worker").to_pylist() if w == worker)


def _wait_for_rows(proc, run_dir, deadline: float, **at_least: int) -> None:
    """Until each named worker has flushed at least that many steady rows, the run alive."""
    while any(_rows_of(run_dir, w) < n for w, n in at_least.items()):
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, f"not {at_least} rows flushed within 120 s"
        time.sleep(0.1)


def _load_args(emu, run_dir, *extra: str) -> list[str]:
    return ["--endpoint", emu.base_url, "--model", emu.model, "--out", str(run_dir),
            "--input-tokens", "16", "--output-tokens", "20", "--warmup-requests", "0",
            "--no-progress", *extra]


def test_a_worker_killed_mid_step_is_named_and_its_records_kept(emu, tmp_path):
    run_dir = tmp_path / "run"
    proc = _cli(_load_args(emu, run_dir, "--concurrency", "4,16", "--requests", "400", "--workers", "2"))
    try:
        deadline = time.monotonic() + 120
        pid = _worker_pid(proc.pid, "steady_state_request_log.w1.partial.arrows", deadline)
        _wait_for_rows(proc, run_dir, deadline, w1=4)
        os.kill(pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, err
    assert "worker w1 failed (killed by SIGKILL)" in err
    m = mf.load(run_dir / "manifest.json")
    assert m["workers"] == [{"name": "w0", "status": "ok", "reason": None},
                            {"name": "w1", "status": "failed", "reason": "killed by SIGKILL"}]
    # its load was not what was asked: in the step it died in, and in the next, where its
    # share was never sent
    assert [(s["step"], s["client_limited"]) for s in m["steps"]] == [("c=4", True), ("c=16", True)]
    steady = rows(run_dir)
    by_worker = {w: sum(1 for r in steady if r["worker"] == w and r["step"] == "c=4")
                 for w in ("w0", "w1")}
    # w0 sent its half; w1 what it had flushed (the survivor does not take over its share)
    assert by_worker["w0"] == 200 and 4 <= by_worker["w1"] < 200
    assert {r["worker"] for r in steady if r["step"] == "c=16"} == {"w0"}
    assert len({r["request_id"] for r in steady}) == len(steady)
    result = analyze_run(run_dir)
    assert result.exit_code in (0, 3), result.message
    assert (run_dir / "derived_metrics.parquet").exists()
    metrics = {r["step"]: r for r in result.metrics.to_pylist()}
    for step in ("c=4", "c=16"):
        assert metrics[step]["n_requests"] == sum(1 for r in steady if r["step"] == step)
        assert metrics[step]["valid"] is False and "client_limited" in metrics[step]["invalid_reason"]


def test_sigterm_to_the_parent_stops_the_workers_and_keeps_records(emu, tmp_path):
    run_dir = tmp_path / "run"
    proc = _cli(_load_args(emu, run_dir, "--rate", "40", "--requests", "4000", "--workers", "2"))
    try:
        deadline = time.monotonic() + 120
        _wait_for_rows(proc, run_dir, deadline, w0=3, w1=3)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert (run_dir / "steady_state_request_log.parquet").exists()
    steady = rows(run_dir)
    assert {r["worker"] for r in steady} == {"w0", "w1"} and 6 <= len(steady) < 4000
    m = mf.load(run_dir / "manifest.json")
    assert m["phases"]["steady"]["ended_at"] is not None
    assert not [n for n in os.listdir(run_dir) if ".w" in n]


@pytest.mark.serial  # a pod on time sends within 0.5 s of the instant
def test_pods_write_shards_only_read_the_same_merged_or_not(emu, tmp_path, monkeypatch):
    shards = tmp_path / "shards"
    # ahead of pod-1's start-up (a process: an import, a probe and a connect, about a second
    # on a quiet 2-core machine, a few on a busy one); pod-0 runs in this process and is on
    # time. A pod past the instant starts at once and reports how late it was, and the
    # checks below hold either way
    start = (datetime.now(UTC) + timedelta(seconds=3)).isoformat().replace("+00:00", "Z")

    def args(i: int) -> list[str]:
        return ["load", *_load_args(emu, shards, "--concurrency", "2", "--requests", "8",
                                    "--worker-index", "env", "--worker-count", "2",
                                    "--start-at", start, "--run-id", "pods-1")]

    # the two pods read their index from the Job's variable, as on Kubernetes
    pod1 = subprocess.Popen(
        [sys.executable, "-m", "servingbench.pipelines.cli", *args(1)], cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "JOB_COMPLETION_INDEX": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        monkeypatch.setenv("JOB_COMPLETION_INDEX", "0")
        assert cli(args(0)) == 0
        out = pod1.communicate(timeout=180)
    finally:
        if pod1.poll() is None:
            pod1.kill()
            pod1.wait()
    assert pod1.returncode == 0, out
    names = sorted(os.listdir(shards))
    assert "steady_state_request_log.pod-0.parquet" in names and "chunk_log.pod-1.parquet" in names
    assert not [n for n in names if n.startswith(("manifest", "steady_state_request_log.parquet"))]
    summary = json.loads((shards / "worker.pod-1.json").read_text())
    assert summary["counts"]["steady_state_request_log"] == 4
    steady = rows(shards)
    assert len(steady) == 8 and {r["worker"] for r in steady} == {"pod-0", "pod-1"}
    assert {r["run_id"] for r in steady} == {"pods-1"}
    first = min(ns(r["sent_at"]) for r in steady)
    start_ns = int(datetime.fromisoformat(start).timestamp() * 1e6) * 1000
    late = [json.loads((shards / f"worker.pod-{i}.json").read_text())["late_start_s"] for i in (0, 1)]
    assert late[0] == 0  # the pod in this process is ready long before the instant
    for i in (0, 1):  # no pod sends before the instant; one on time sends right after it
        sent = [ns(r["sent_at"]) for r in steady if r["worker"] == f"pod-{i}"]
        assert min(sent) >= start_ns
        if late[i] == 0:
            assert min(sent) - start_ns < 0.5e9
    # the collector's manifest; the folder is then analysed as it is and merged
    m = mf.empty("pods-1", "emulated", first)
    m["steps"] = [{"step": "c=2", "load_mode": "concurrency", "target": 2.0, "client_limited": False,
                   "client_cpu_share": None, "loop_lag_p99_s": None}]
    mf.dump(m, shards / "manifest.json")
    merged = tmp_path / "merged"
    shutil.copytree(shards, merged)
    kept = merged / "kept.parquet"
    shutil.copy(merged / "chunk_log.pod-0.parquet", kept)
    assert merge_shards(merged)["workers"] == ["pod-0", "pod-1"]
    a, b = analyze_run(shards), analyze_run(merged)
    assert a.exit_code == b.exit_code != 2, (a.message, b.message)
    ra, rb = a.metrics.to_pylist(), b.metrics.to_pylist()
    assert len(ra) == len(rb) == 1 and ra[0].keys() == rb[0].keys()
    for key, value in ra[0].items():  # the same numbers (floating sums may differ by order)
        other = rb[0][key]
        assert other == (pytest.approx(value, rel=1e-9) if isinstance(value, float) else value), key
    # a merge cut off before it removed a shard: the merged file says it holds it
    shutil.move(kept, merged / "chunk_log.pod-0.parquet")
    assert read_records(merged, "chunk_log").num_rows == read_records(shards, "chunk_log").num_rows
    assert merge_shards(merged)["workers"] == ["pod-0", "pod-1"]
    assert not (merged / "chunk_log.pod-0.parquet").exists()


@pytest.mark.parametrize(("args", "flag"), [
    (["--workers", "0"], "--workers"),
    (["--workers", "x"], "--workers"),
    (["--worker-index", "3", "--worker-count", "2", "--start-at", "2026-11-30T18:00:00Z",
      "--run-id", "r"], "--worker-index"),
    (["--worker-index", "0", "--worker-count", "2", "--start-at", "tomorrow", "--run-id", "r"],
     "--start-at"),
    (["--worker-index", "0", "--worker-count", "2", "--start-at", "2026-11-30T18:00:00",
      "--run-id", "r"], "--start-at"),
    (["--worker-index", "0", "--worker-count", "2", "--start-at", "2026-11-30T18:00:00Z"],
     "--run-id"),
    (["--worker-index", "env", "--worker-count", "2", "--start-at", "2026-11-30T18:00:00Z",
      "--run-id", "r"], "--worker-index"),
    (["--worker-count", "2"], "--worker-count"),
    (["--barrier-uri", "s3://b/p/runs/r/barrier"], "--barrier-uri"),
    (["--barrier-timeout", "5"], "--barrier-timeout"),
    (["--worker-index", "0", "--worker-count", "2", "--start-at", "2026-11-30T18:00:00Z",
      "--run-id", "r", "--barrier-timeout", "0"], "--barrier-timeout"),
    (["--worker-index", "0", "--worker-count", "2", "--start-at", "2026-11-30T18:00:00Z",
      "--run-id", "r", "--barrier-uri", "s3:///runs/r"], "--barrier-uri"),
])
def test_bad_worker_flags_exit_2_naming_the_flag(tmp_path, capsys, monkeypatch, args, flag):
    monkeypatch.delenv("JOB_COMPLETION_INDEX", raising=False)
    argv = ["--endpoint", "http://127.0.0.1:9", "--model", "m", "--out", str(tmp_path / "r"), *args]
    try:
        code = load_cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    assert flag in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
