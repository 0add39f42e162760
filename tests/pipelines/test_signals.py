"""SIGTERM, Ctrl-C and kill -9 in each phase of a local chain run (`servingbench run` as a
real subprocess): it ends, tears down what it created (the emulator), keeps its records
readable, and leaves no orphan process, even when killed with SIGKILL."""

from __future__ import annotations

import signal

import pytest

from resources.contract import manifest as mf
from resources.contract.schemas import read_records
from tests.support.signals import ChainRun


def started(run: ChainRun, phase: str):
    return lambda: phase in run.manifest_phases()


def steady_rows(run: ChainRun) -> int:
    """Steady records flushed so far (the stream is read while it is being written)."""
    try:
        table = read_records(run.run_dir(), "steady_state_request_log")
    except Exception:  # noqa: BLE001 - a stream caught mid-write: look again
        return 0
    return 0 if table is None else table.num_rows


def records_readable(run: ChainRun) -> dict[str, int]:
    """Every record set the run wrote reads back (parquet, or the partial stream that a
    killed run leaves), and its manifest is valid."""
    d = run.run_dir()
    assert d is not None, "the run folder was never created"
    mf.load(d / "manifest.json")
    rows = {}
    for name in ("warmup_log", "steady_state_request_log", "chunk_log"):
        table = read_records(d, name)
        if table is not None:
            rows[name] = table.num_rows
    return rows


@pytest.mark.parametrize("phase, sig", [
    ("provision", signal.SIGTERM),
    ("deploy", signal.SIGTERM),
    ("load", signal.SIGTERM),
    ("load", signal.SIGINT),
])
def test_a_signal_in_any_phase_tears_down_and_keeps_the_records(tmp_path, phase, sig):
    run = ChainRun(tmp_path, cold_start_s=30 if phase == "deploy" else 0.2,
                   requests_per_step=100_000)
    if phase == "provision":  # the run has a folder and a manifest, nothing deployed yet
        run.wait_until("the run's manifest", lambda: run.run_dir() is not None and (
            run.run_dir() / "manifest.json").exists())
    elif phase == "deploy":  # the emulator is in its cold start
        run.wait_until("the emulator's start", lambda: bool(run.emulators))
    else:  # steady requests are being recorded
        run.wait_until("the steady phase", started(run, "steady"))
        run.wait_until("a flushed steady record", lambda: steady_rows(run) >= 1)
    run.signal(sig)
    rc = run.wait()
    assert rc != 0  # interrupted, not a success
    assert run.orphans() == [], "an emulator outlived the run"
    rows = records_readable(run)
    if phase == "load":  # the load generator finalized what it had recorded
        assert rows.get("steady_state_request_log", 0) >= 1
        assert (run.run_dir() / "steady_state_request_log.parquet").exists()
        assert run.manifest_phases()["steady"]["ended_at"] is not None


def test_sigterm_after_the_load_ends_keeps_everything(tmp_path):
    run = ChainRun(tmp_path, cold_start_s=0.2, requests_per_step=4)
    run.wait_until("the end of the load", lambda: run.run_dir() is not None and (
        run.run_dir() / "steady_state_request_log.parquet").exists())
    run.signal(signal.SIGTERM)  # the bill, gates or metrics links: whichever runs now
    run.wait()
    assert run.orphans() == []
    assert records_readable(run)["steady_state_request_log"] >= 1


def test_kill_9_in_the_load_leaves_no_orphan_and_readable_records(tmp_path):
    run = ChainRun(tmp_path, cold_start_s=0.2, requests_per_step=100_000)
    run.wait_until("the steady phase", started(run, "steady"))
    run.wait_until("a flushed steady record", lambda: steady_rows(run) >= 1)
    run.signal(signal.SIGKILL)  # nothing runs in the chain's process after this
    assert run.wait() == -signal.SIGKILL
    assert run.emulators, "the emulator was never seen"
    assert run.orphans() == [], "the emulator outlived its SIGKILLed parent"
    records_readable(run)  # the flushed stream reads back
