"""Load pods meet before every step (resources/loadgen/workers/podsync.py), through moto's S3
server: two `servingbench loadpod` processes against the fixed-timing server on 127.0.0.1
never run two steps at once, even when one pod's share of a step is much longer; a pod that
never comes is left behind after the bound and named, one that comes too late stops and
keeps its records; and every pod computes the same start from the same arrivals."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from servingbench.pipelines.cli import main as cli
from servingbench.resources.contract import manifest as mf
from servingbench.resources.loadgen.clock import Clock
from servingbench.resources.loadgen.errors import LeftBehind
from servingbench.resources.loadgen.workers.podsync import (
    LATE_START_S,
    MARGIN_S,
    SCALE_ENV,
    WINDOW_S,
    Arrival,
    Meeting,
    PodSync,
    Waits,
    meet,
)
from servingbench.resources.loadjob.generator import collect
from servingbench.resources.loadjob.job import PodOutcome
from servingbench.resources.storage import runstore
from servingbench.resources.storage.board import Board

from tests.support.eks.aws import DUMMY_KEY_ID, DUMMY_SECRET
from tests.support.emulator import FIXED_MODEL, FixedTimingServer
from tests.support.loadgen import ROOT, ns, rows

S = 1_000_000_000
# the pods here share one clock and moto lists every write at once: the meetings' fixed
# waits (margin 1 s, window 2 s, poll 0.3 s) at a quarter; the deadlines stay as given
FAST = "0.25"


@pytest.fixture
def slow_server(tmp_path):
    # 20 ms + 24 × 5 ms ≈ 0.14 s a request: a c=1 step of 10 is over a second on one pod
    s = FixedTimingServer(tmp_path, ttft_ms=20, itl_ms=5)
    yield s
    s.stop()


def _start_at(seconds: float) -> str:
    # a pod that starts its first step late still meets the others before the next one
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def _args(server, upload: str, scratch: Path, start_at: str, *extra: str) -> list[str]:
    return ["loadpod", "--upload", upload, "--scratch", str(scratch), "--",
            "--endpoint", server.base_url, "--model", FIXED_MODEL, "--input-tokens", "8",
            "--output-tokens", "24", "--run-id", "meet-1", "--no-progress",
            "--worker-index", "env", "--worker-count", "2", "--start-at", start_at, *extra]


def _pod(server, upload: str, scratch: Path, index: int, start_at: str, *extra: str):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JOB_COMPLETION_INDEX": str(index),
           SCALE_ENV: FAST}
    return subprocess.Popen([sys.executable, "-m", "servingbench.pipelines.cli",
                             *_args(server, upload, scratch, start_at, *extra)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _fetch(upload: str, dest: Path) -> list[str]:
    names = [f"{n}.pod-{i}.parquet" for n in ("steady_state_request_log", "chunk_log", "warmup_log")
             for i in (0, 1)] + ["worker.pod-0.json", "worker.pod-1.json"]
    dest.mkdir()
    return runstore.get(upload, names, dest)


def _summary(folder: Path, worker: str) -> dict:
    return json.loads((folder / f"worker.{worker}.json").read_text())


def test_no_step_starts_on_any_pod_before_every_pod_finished_the_last(slow_server, s3_bucket,
                                                                      tmp_path):
    # Not serial: nothing here can be failed by a slow machine. The first step's instant is
    # now: a pod past it starts at once (nothing below depends on the first start), the
    # meetings have no deadline within reach (1,800 s for steps bounded by a count), and
    # every time compared is a lower bound (sends after the meeting's start, after the
    # previous step's last answer) that the protocol guarantees whatever the pods' speed.
    upload = f"{s3_bucket}/runs/meet-1"
    start = _start_at(0)
    # c=1 over two pods: pod-0 sends all 6 requests one after another, pod-1 none, so
    # back to back pod-1 would be in c=2 (and warm-up alike) while pod-0 is still in c=1
    plan = ("--concurrency", "1,2", "--requests", "6", "--warmup-requests", "2")
    pods = [_pod(slow_server, upload, tmp_path / f"s{i}", i, start, *plan) for i in (0, 1)]
    outs = [p.communicate(timeout=120) for p in pods]
    assert [p.returncode for p in pods] == [0, 0], outs
    got = tmp_path / "got"
    assert len(_fetch(upload, got)) == 8
    steady, warm = rows(got), rows(got, "warmup_log")
    by_step = {name: [r for r in steady if r["step"] == name] for name in ("c=1", "c=2")}
    assert len(by_step["c=1"]) == 6 and {r["worker"] for r in by_step["c=1"]} == {"pod-0"}
    assert len(by_step["c=2"]) == 6 and {r["worker"] for r in by_step["c=2"]} == {"pod-0", "pod-1"}
    # no request of a step was sent before the last request of the one before finished
    phases = [warm, by_step["c=1"], by_step["c=2"]]
    for before, after in zip(phases, phases[1:], strict=False):
        assert min(ns(r["sent_at"]) for r in after) > max(ns(r["finished_at"]) for r in before)
    meetings = [_summary(got, f"pod-{i}")["meetings"] for i in (0, 1)]
    assert [m["label"] for m in meetings[0]] == ["c=1", "c=2"]
    assert meetings[0] == [{**m, "late_s": meetings[0][k]["late_s"]}
                           for k, m in enumerate(meetings[1])]  # the same starts, members
    for m in meetings[0]:
        assert m["present"] == ["pod-0", "pod-1"] and m["missing"] == []
    for i in (0, 1):  # each pod started each step at the common instant, not before it
        for m, name in zip(meetings[i], ("c=1", "c=2"), strict=True):
            sent = [ns(r["sent_at"]) for r in by_step[name] if r["worker"] == f"pod-{i}"]
            assert all(t >= mf.parse_ts(m["start_at"]) for t in sent)
    assert not [n for n in _board(upload) if n.startswith("gone/")]


def _board(upload: str) -> list[str]:
    fs, base = runstore.filesystem(f"{upload}/barrier")
    from pyarrow import fs as pafs

    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    return [i.path[len(base) + 1:] for i in infos if i.type == pafs.FileType.File]


@pytest.mark.serial  # pod-0's c=1 (0.6 s) must end within the 3 s meeting bound
def test_a_pod_that_never_comes_is_left_behind_and_one_too_late_stops(slow_server, s3_bucket,
                                                                      tmp_path, monkeypatch,
                                                                      capsys):
    upload = f"{s3_bucket}/runs/meet-1"
    start = _start_at(0)
    plan = ("--concurrency", "1,2", "--requests", "4", "--warmup-requests", "0",
            "--barrier-timeout", "3")
    # pod-1 is not there: pod-0 waits for it until the meeting closes (3 s after c=1
    # started), then goes on alone and names it. pod-0 runs in this process (no start-up to
    # wait for before its instant); pod-1, whose exit status is the point, is a process.
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "0")
    monkeypatch.setenv(SCALE_ENV, FAST)
    capsys.readouterr()
    assert cli(_args(slow_server, upload, tmp_path / "s0", start, *plan)) == 0, \
        capsys.readouterr().err
    out0 = capsys.readouterr().out
    assert "before c=2: went on without pod-1" in out0
    # pod-1 comes long after: it runs no step past the meeting it missed, says why, keeps
    # what it recorded (its c=1 share is empty) and tells the others it is gone
    p1 = _pod(slow_server, upload, tmp_path / "s1", 1, start, *plan)
    out1, err1 = p1.communicate(timeout=120)
    assert p1.returncode == 1, err1
    assert "worker pod-1 left behind at the meeting before c=2: arrived" in err1
    assert "loadpod pod-1: uploaded" in err1 and DUMMY_SECRET not in out1 + err1
    assert "gone/1.pod-1" in _board(upload)
    got = tmp_path / "got"
    _fetch(upload, got)
    s0, s1 = _summary(got, "pod-0"), _summary(got, "pod-1")
    (m,) = s0["meetings"]
    assert (m["label"], m["present"], m["missing"]) == ("c=2", ["pod-0"], ["pod-1"])
    # the absent pod's step ran without its share, and so did every later one: marked; no
    # wait past the bound
    assert [(s["step"], s["client_limited"]) for s in s0["steps"]] == [("c=1", True), ("c=2", True)]
    closed = mf.parse_ts(m["deadline"])
    assert closed == mf.parse_ts(start) + 3 * S
    fast = Waits.from_env({SCALE_ENV: FAST})
    assert mf.parse_ts(m["start_at"]) == closed + int(fast.window_s * S) + int(fast.margin_s * S)
    assert s1["left_behind"]["label"] == "c=2" and [s["step"] for s in s1["steps"]] == ["c=1"]
    assert {r["step"] for r in rows(got) if r["worker"] == "pod-0"} == {"c=1", "c=2"}
    # the collector names the pod the others went on without, and why
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    mf.dump(mf.empty("meet-1", "emulated", closed), run_dir / "manifest.json")
    said: list[str] = []
    collect(upload, run_dir, [PodOutcome(0, "p0", "ok", None),
                              PodOutcome(1, "p1", "failed", "container load exited 1")], said.append)
    workers = mf.load(run_dir / "manifest.json")["workers"]
    assert workers[0] == {"name": "pod-0", "status": "ok", "reason": None}
    assert workers[1]["status"] == "failed"
    assert workers[1]["reason"].startswith("left behind at the meeting before c=2: arrived")
    assert workers[1]["reason"].endswith("; container load exited 1")
    assert any("left behind at a meeting" in s and "pod-1" in s for s in said)


def test_every_pod_computes_the_same_meeting_from_the_same_arrivals():
    members = frozenset(range(4))
    deadline = 1_000 * S
    arrivals = [Arrival(0, "pod-0", 900 * S), Arrival(1, "pod-1", 930 * S + 7),
                Arrival(2, "pod-2", 910 * S), Arrival(3, "pod-3", 999 * S)]
    seen = []
    for now in (999 * S, 1_000 * S, 1_500 * S):  # any pod, whenever it lists, in any order
        shuffled = random.Random(now).sample(arrivals, len(arrivals))
        seen.append(meet(members, shuffled, set(), deadline, now))
    assert seen[0] == seen[1] == seen[2]
    assert seen[0].start_ns == 999 * S + int(MARGIN_S * S) and seen[0].missing == frozenset()
    # one missing: wait until the window past the deadline, then every pod goes on alike
    three = arrivals[:3]
    assert meet(members, three, set(), deadline, deadline + int(WINDOW_S * S) - 1) is None
    late = [meet(members, random.Random(k).sample(three, 3), set(), deadline,
                 deadline + int(WINDOW_S * S) + k * S) for k in range(3)]
    assert late[0] == late[1] == late[2]
    assert late[0].start_ns == deadline + int((WINDOW_S + MARGIN_S) * S)
    assert late[0].present == {0, 1, 2} and late[0].missing == {3}
    # an arrival stamped past the deadline, or of a pod already left behind, does not count
    past = [*three, Arrival(3, "pod-3", deadline + 1)]
    assert meet(members, past, set(), deadline, deadline + 1) is None
    first_three = 930 * S + 7 + int(MARGIN_S * S)
    assert meet(frozenset({0, 1, 2}), past, set(), deadline, 950 * S) == Meeting(
        first_three, frozenset({0, 1, 2}), frozenset())
    # a pod gone for good is not waited for, and is named
    assert meet(members, three, {3}, deadline, 950 * S) == Meeting(
        first_three, frozenset({0, 1, 2}), frozenset({3}))
    assert Arrival.parse(arrivals[1].key) == arrivals[1] and Arrival.parse("gone") is None
    # scaled waits (SCALE_ENV): the same decisions, a quarter of the margin and window
    fast = Waits.from_env({SCALE_ENV: "0.25"})
    assert (fast.poll_s, fast.margin_s, fast.window_s) == (0.075, 0.25, 0.5)
    assert Waits.from_env({}) == Waits() == Waits(0.3, MARGIN_S, WINDOW_S)
    assert meet(members, three, set(), deadline, deadline + S // 2 - 1, fast) is None
    assert meet(members, three, set(), deadline, deadline + S // 2, fast).start_ns == \
        deadline + 3 * S // 4
    assert meet(members, arrivals, set(), deadline, 999 * S, fast).start_ns == 999 * S + S // 4
    for bad in ("0", "-1", "nan", "inf", "fast"):
        with pytest.raises(ValueError, match=f"{SCALE_ENV}="):
            Waits.from_env({SCALE_ENV: bad})


def test_a_bad_meeting_scale_is_exit_2_naming_the_variable(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(SCALE_ENV, "soon")
    code = cli(["load", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--out",
                str(tmp_path / "r"), "--concurrency", "1,2", "--worker-index", "0",
                "--worker-count", "2", "--start-at", "2026-11-30T18:00:00Z", "--run-id", "r",
                "--barrier-uri", str(tmp_path / "barrier")])
    assert code == 2
    assert f"{SCALE_ENV}='soon': expected a positive number" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


class _CountingBoard(Board):
    puts = 0

    def put(self, name: str, data: bytes) -> None:
        self.puts += 1
        super().put(name, data)


@pytest.mark.serial  # wall-clock starts and meeting bounds
def test_s3_errors_are_retried_until_the_bound_and_name_no_secret(s3_bucket):
    # a bucket that is not there: every write fails; the pod, a second short of the latest
    # start allowed, retries for that second, then runs nothing and says why
    board = _CountingBoard("s3://sb-no-such-bucket/runs/x/barrier")
    sync = PodSync(board, 0, 2, "pod-0", time.time_ns() - int((LATE_START_S - 1) * S),
                   (600.0, 600.0))
    run = SimpleNamespace(clock=Clock.start(), steps=[])
    with pytest.raises(LeftBehind) as caught:
        asyncio.run(sync(run, "c=1"))
    message = str(caught.value)
    assert "left behind at the meeting before c=1: could not say it started (OSError: " \
        "writing s3://sb-no-such-bucket/runs/x/barrier/start/0.pod-0." in message
    assert DUMMY_SECRET not in message and DUMMY_KEY_ID not in message
    assert board.puts >= 3  # retried within the bound, then one `gone` try
    assert sync.left_behind["label"] == "c=1"


def ahead(seconds: float) -> Clock:
    """A pod's clock that reads `seconds` later than this machine's: what the pod sees that
    much later, without the test waiting for it."""
    now = Clock.start()
    return Clock(now.anchor_utc_ns + int(seconds * S), now.anchor_perf_ns)


@pytest.mark.serial  # the first step 2 s short of the latest start allowed, by the real clock
def test_a_pod_that_never_started_is_given_up_soon_and_a_very_late_one_runs_nothing(tmp_path):
    board = Board(str(tmp_path / "barrier"))  # the same board over a local folder
    just_in_time = time.time_ns() - int((LATE_START_S - 2) * S)
    pod0 = PodSync(board, 0, 2, "pod-0", just_in_time, (600.0, 600.0))
    run = SimpleNamespace(clock=Clock.start(), steps=[{"step": "c=1", "client_limited": False}])
    # the pod's clock past the Job's instant + LATE_START_S + the window: every start written
    # in time is listed by then (instead of the test waiting those seconds out)
    later = ahead(2 + WINDOW_S + 0.1)

    async def steps() -> None:
        await pod0(run, "c=1")  # 58 s late: it still runs, and says it started
        # pod-1 never said it started: given up 60 s (+ the window) after the Job's
        # instant, long before this meeting's deadline (600 s after c=1 started)
        run.clock = later
        await asyncio.wait_for(pod0(run, "c=2"), 60)

    asyncio.run(steps())
    (m,) = pod0.meetings
    assert (m["present"], m["missing"]) == (["pod-0"], ["pod-1"])
    assert mf.parse_ts(m["deadline"]) == just_in_time + 600 * S
    assert run.steps[0]["client_limited"] is True
    assert pod0.late_s > LATE_START_S - 3
    # a pod later than that runs nothing: the others may have gone on without it
    pod1 = PodSync(board, 1, 2, "pod-1", just_in_time, (600.0, 600.0))
    with pytest.raises(LeftBehind, match=r"pod-1 left behind at the meeting before c=1: started "
                                         r"6\d\.\d s after the Job's instant"):
        asyncio.run(pod1(run, "c=1"))
    assert [Arrival.parse(k).name for k in board.names("start")] == ["pod-0"]
    assert board.names("gone") == ["1.pod-1"]
