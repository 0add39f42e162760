"""A disk that fills up in the middle of a step, end to end: `servingbench load` as a real
process against the emulator as a real server process, its run folder on a small tmpfs
(where this process may mount one: root with CAP_SYS_ADMIN) or under a real OS write limit
(RLIMIT_FSIZE with SIGXFSZ ignored: every write past the limit fails with EFBIG, which the
writer treats exactly like ENOSPC). The run must stop by itself, say so, keep every record it
flushed readable and consistent, leave no temp file, and close its manifest. The same holds
for a run of worker processes (`--workers 2`: the limit and the mount are theirs too, an
rlimit being inherited by every process the command spawns) and for one worker of several
(`--worker-index`, a pod)."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import resource
import signal
import subprocess
import sys
import uuid

import pytest
from servingbench.emulator.process import EmulatorProcess
from servingbench.pipelines.cli import analyze
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.schemas import PARTIAL_SUFFIX, read_records

from tests.support.loadgen import ROOT

pytestmark = pytest.mark.slow  # a chain, a job or processes: not in `make check`

DISK = 1 << 20  # the tmpfs, and the file-size limit: the chunk log fills it in a few seconds
LOAD = ["--concurrency", "8", "--requests", "1000000", "--warmup-requests", "4",
        "--input-tokens", "16", "--output-tokens", "64", "--no-tokenize", "--no-progress",
        "--drain-timeout", "5"]


@pytest.fixture(scope="module")
def emulator():
    # slow enough that one quarter-second flush is a small part of the disk on any machine:
    # at 0.0005 a quiet machine streamed more than the whole disk between two flushes, so
    # not one steady row was ever kept and the test measured the machine, not the recorder
    with EmulatorProcess(["--time-scale", "0.05", "--cold-start-s", "0", "--seed", "5"]) as e:
        yield e


def _mount_tmpfs(where) -> bool:
    where.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK},mode=0755", "tmpfs",
                               str(where)], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.fixture(params=["tmpfs", "rlimit"])
def disk(request, tmp_path):
    """(folder on the small disk, a preexec function for the writer, what its message says)."""
    if request.param == "rlimit":
        def limit() -> None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a core dump
            resource.setrlimit(resource.RLIMIT_FSIZE, (DISK, DISK))
        yield tmp_path, limit, "File too large"
        return
    where = tmp_path / "small"
    if not _mount_tmpfs(where):
        pytest.skip("this process may not mount a tmpfs (the rlimit case still runs)")
    try:
        yield where, None, "No space left on device"
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


def _fill(path) -> None:
    # the disk may already be so full that creating the file fails: then it is full already
    with contextlib.suppress(OSError), open(path, "wb") as f:
        while True:
            f.write(bytes(64 << 10))
            f.flush()


def _cli(args: list[str], preexec=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVINGBENCH_")}
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run([sys.executable, "-m", "servingbench.pipelines.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=150, preexec_fn=preexec)


def _stopped_cleanly(done: subprocess.CompletedProcess, run_dir, reason: str) -> list[str]:
    """It stopped by itself and says why, leaving only the run's own files; their names."""
    assert done.returncode == 74, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert f"disk full: cannot write {run_dir}" in done.stderr and reason in done.stderr
    assert "the run stopped" in done.stderr
    names = sorted(os.listdir(run_dir))
    assert not [n for n in names if n.startswith(".") or n.endswith(".tmp")], names
    return names


def _kept(done: subprocess.CompletedProcess, run_dir):
    """What was flushed reads back, consistent (every chunk belongs to a kept request row),
    and the counts the message gives are the rows on disk."""
    steady = read_records(run_dir, "steady_state_request_log")
    warm = read_records(run_dir, "warmup_log")
    chunks = read_records(run_dir, "chunk_log")
    assert steady is not None and steady.num_rows > 0
    rows = set(steady.column("request_id").to_pylist())
    if warm is not None:
        rows |= set(warm.column("request_id").to_pylist())
    assert set(chunks.column("request_id").to_pylist()) <= rows
    assert f"{steady.num_rows} steady_state_request_log" in done.stderr  # the kept count is true
    assert f"{chunks.num_rows} chunk_log" in done.stderr, done.stderr
    return steady, warm, chunks


@pytest.mark.timeout(240)
def test_a_disk_that_fills_mid_step_stops_the_run_cleanly(emulator, disk, capsys):
    folder, preexec, reason = disk
    run_dir = folder / f"run-{uuid.uuid4().hex[:6]}"
    model = emulator.status()["config"]["served_model_name"]
    done = _cli(["load", "--endpoint", emulator.base_url, "--model", model, "--out", str(run_dir),
                 *LOAD], preexec)

    names = _stopped_cleanly(done, run_dir, reason)
    assert "manifest.json" in names
    # the stream that hit the limit stays a stream: its complete batches are the records
    assert f"chunk_log{PARTIAL_SUFFIX}" in names or "chunk_log.parquet" in names

    # the manifest says what happened: steady closed at the stop, the step never completed
    m = mf.load(run_dir / "manifest.json")
    assert m["phases"]["steady"]["ended_at"] is not None
    assert m["phases"]["warmup"]["ended_at"] is not None
    # the one step was cut short by the full disk: listed, and flagged client-limited (its
    # load was never fully sent), so its rows never read as a valid step
    assert m["steps"] == [{"step": "c=8", "load_mode": "concurrency", "target": 8.0,
                           "client_limited": True, "client_cpu_share": None,
                           "loop_lag_p99_s": None}]

    steady, warm, _ = _kept(done, run_dir)
    assert warm is not None and warm.num_rows == 4

    # the analyzer (the command's own code, in this process): on the full disk it says its
    # outputs did not fit, the records untouched; with room it reads the partial streams
    before = {n: (run_dir / n).read_bytes() for n in names}
    if preexec is None:
        filler = folder / "filler"
        _fill(filler)  # the reserve the run gave back is taken too: not one page left
        assert analyze.main([str(run_dir)]) == 74
        err = capsys.readouterr().err
        assert f"NOT WRITTEN: disk full: cannot write {run_dir / 'gates.json'}" in err
        assert "analyze again" in err
        assert sorted(os.listdir(run_dir)) == names  # no temp left by the analyzer either
        assert {n: (run_dir / n).read_bytes() for n in names} == before
        filler.unlink(missing_ok=True)
    assert analyze.main([str(run_dir)]) in (0, 3)
    assert "read from partial streams" in capsys.readouterr().out
    assert {n: (run_dir / n).read_bytes() for n in names} == before  # raw records untouched


@pytest.mark.timeout(240)
def test_a_worker_process_on_a_full_disk_stops_the_run_cleanly(emulator, disk):
    folder, preexec, reason = disk
    run_dir = folder / f"run-{uuid.uuid4().hex[:6]}"
    model = emulator.status()["config"]["served_model_name"]
    done = _cli(["load", "--endpoint", emulator.base_url, "--model", model, "--out", str(run_dir),
                 *LOAD, "--workers", "2"], preexec)

    names = _stopped_cleanly(done, run_dir, reason)
    # the worker that hit the limit is named failed, with the reason; the run's phases close
    m = mf.load(run_dir / "manifest.json")
    failed = [w for w in m["workers"] if w["status"] == "failed"]
    full = [w for w in failed if w["reason"].startswith("disk full")]
    assert full, m["workers"]
    for w in full:
        # whichever of its streams (or shards, for a worker stopped while finalizing) it was
        assert w["reason"].startswith(f"disk full: cannot write {run_dir}{os.sep}"), w
        assert f".{w['name']}." in w["reason"], w
        assert reason in w["reason"]
    # the run stops every worker when one finds the disk full: one still starting up (a
    # loaded machine's spawn takes seconds) is stopped before it records anything, and says so
    assert all(w in full or w["reason"] == "stopped before it could record anything"
               for w in failed), m["workers"]
    assert {w["name"] for w in m["workers"]} == {"w0", "w1"}
    assert m["phases"]["steady"]["ended_at"] is not None
    # the step the full disk cut short: listed, client-limited
    assert [(s["step"], s["client_limited"]) for s in m["steps"]] == [("c=8", True)]
    # the failed worker's streams stay as its shards, read like any other
    assert [n for n in names if n.endswith(PARTIAL_SUFFIX)], names
    steady, warm, _ = _kept(done, run_dir)
    assert set(steady.column("worker").to_pylist()) <= {"w0", "w1"}
    assert warm is not None and warm.num_rows == 4


@pytest.mark.timeout(240)
def test_one_worker_of_several_on_a_full_disk_says_so(emulator, disk):
    folder, preexec, reason = disk
    run_dir = folder / f"run-{uuid.uuid4().hex[:6]}"
    model = emulator.status()["config"]["served_model_name"]
    # Not serial: a worker past its instant starts at once (it is alone: no meeting, no
    # deadline), and nothing below compares measured times, as in the test above
    start = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=2)).isoformat()
    done = _cli(["load", "--endpoint", emulator.base_url, "--model", model, "--out", str(run_dir),
                 *LOAD, "--worker-index", "1", "--worker-count", "2", "--start-at", start,
                 "--run-id", "run-full", "--worker-name", "pod"], preexec)

    names = _stopped_cleanly(done, run_dir, reason)
    assert ".pod-1.partial.arrows (" in done.stderr  # its own stream was the one refused
    # only this worker's files: its streams (the records), no manifest (the collector's)
    assert set(names) <= {f"{n}.pod-1{PARTIAL_SUFFIX}" for n in
                          ("warmup_log", "steady_state_request_log", "chunk_log")}, names
    steady, warm, _ = _kept(done, run_dir)
    assert set(steady.column("worker").to_pylist()) == {"pod-1"}
    assert warm is not None and warm.num_rows == 2  # its half of the warm-up


def test_a_step_cut_short_is_listed_once():
    """The step under way when a full disk stops the run is listed client-limited, with no
    self-watch figures (a schedule is one step: its segments are not steps of their own)."""
    from servingbench.resources.loadgen.steps import Run

    run = Run.__new__(Run)  # only the bookkeeping of the steps is exercised here
    run.steps, run.current = [], ("schedule", "rate", 3.0)
    run._record_cut()
    assert [(s["step"], s["client_limited"], s["loop_lag_p99_s"]) for s in run.steps] == [
        ("schedule", True, None)]
    run._record_cut()  # nothing under way any more: nothing listed twice
    assert len(run.steps) == 1
