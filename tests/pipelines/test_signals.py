"""SIGTERM in each phase of a local chain run (`servingbench run` as a real subprocess) and
kill -9 mid-load: it ends, tears down what it created (the emulator), keeps its records
readable, and leaves no orphan process, even when killed with SIGKILL. Ctrl-C mid-load is
the load generator's to take, in-process."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.schemas import read_records

from tests.support.signals import ChainRun

pytestmark = pytest.mark.slow  # a chain, a job or processes: not in `make check`


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


# Every phase meets SIGTERM: each has its own way out (provision before anything exists,
# deploy inside the emulator's start, load through the load generator's finalization, bill
# after the emulator is gone). SIGKILL once, in load, where it can leave the most behind:
# an emulator, a half-written stream and a manifest with open phases. A kill in provision
# or deploy would find on disk exactly what SIGTERM there reads back (nothing rewrites the
# manifest on the way out of either phase), and the emulator's own exit on a SIGKILLed
# parent, before and after it serves, is proven in tests/emulator/test_emu_hardening.py;
# what only a chain proves is that the chain starts it with that watch, which load shows.
# Not bill with SIGKILL: the load has finalized its records and the emulator is gone before
# the bill is fetched, and the hold writes nothing, so a kill there finds on disk exactly
# what bill with SIGTERM reads back after its handler ran. Ctrl-C is taken where it has work
# to do: mid-load, with records to finalize. In a chain it differs from SIGTERM in one place
# only, the load generator's own handler for it (Dagster maps SIGTERM onto its SIGINT
# handler, and the load generator raises KeyboardInterrupt for either), so it is taken
# in-process, on a busy load, below: a third chain would prove again what SIGTERM in load
# proves.
@pytest.mark.parametrize("phase, sig", [
    ("provision", signal.SIGTERM),
    ("deploy", signal.SIGTERM),
    ("load", signal.SIGTERM),
    ("load", signal.SIGKILL),
    ("bill", signal.SIGTERM),
])
def test_a_signal_in_any_phase_tears_down_and_keeps_the_records(tmp_path, phase, sig):
    """Each phase is caught at a moment the test knows: provision and bill are held inside
    their own code (tests/support/hold) until the signal; deploy is the emulator's cold
    start; load is a flushed steady record."""
    run = ChainRun(tmp_path, cold_start_s=30 if phase == "deploy" else 0.2,
                   requests_per_step=4 if phase == "bill" else 100_000,
                   hold=phase if phase in ("provision", "bill") else None)
    if phase in ("provision", "bill"):
        run.wait_until(f"the {phase} phase", run.held.exists)
    elif phase == "deploy":  # the emulator is in its cold start
        run.wait_until("the emulator's start", lambda: bool(run.emulators))
    else:  # steady requests are being recorded
        run.wait_until("the steady phase", started(run, "steady"))
        run.wait_until("a flushed steady record", lambda: steady_rows(run) >= 1)
    run.signal(sig)
    rc = run.wait()
    if sig == signal.SIGKILL:
        assert rc == -signal.SIGKILL  # nothing in the chain ran after this
    else:
        assert rc not in (0, -sig)  # the chain handled it, and says it did not finish
    assert run.orphans() == [], "an emulator outlived the run"
    if phase in ("deploy", "load"):
        assert run.emulators, "the emulator was never seen"
    rows = records_readable(run)  # the manifest is valid; every record set reads back
    if phase == "load" and sig != signal.SIGKILL:  # the load generator finalized its records
        assert rows.get("steady_state_request_log", 0) >= 1
        assert (run.run_dir() / "steady_state_request_log.parquet").exists()
        assert run.manifest_phases()["steady"]["ended_at"] is not None
    if phase == "bill":  # the load had ended: everything it wrote is final
        assert rows["steady_state_request_log"] == 4
        assert (run.run_dir() / "chunk_log.parquet").exists()
        assert not (run.run_dir() / "bill.parquet").exists()  # held before it was written
    if phase == "provision":
        assert rows == {}  # nothing was recorded yet, and nothing was started
        assert not run.emulators


class _Raised(Exception):
    """What a Python-level SIGINT handler (Dagster's in a chain) raises where it lands."""


@pytest.mark.timeout(120)
def test_ctrl_c_mid_load_is_taken_by_the_load_generator(tmp_path):
    """Ctrl-C mid-load while a Python-level SIGINT handler that raises is installed, as
    Dagster's is in a chain: the load generator takes the signal itself (a handler raising
    inside a transport callback would be logged by the loop, and the run would go on),
    finalizes its records and raises KeyboardInterrupt, and the caller's handler is back
    afterwards, never having run."""
    from servingbench.resources.loadgen import LoadConfig, run_load

    from tests.support.emulator import FIXED_MODEL, FixedTimingServer

    calls = []

    def raising(signum, frame):
        calls.append(signum)
        raise _Raised

    srv = FixedTimingServer(tmp_path, ttft_ms=5, itl_ms=2)
    run_dir = tmp_path / "run"

    done = threading.Event()  # never a late SIGINT: it would stop this whole pytest process

    def interrupt_once_flushed():  # mid-load: steady requests streaming, one flushed
        deadline = time.monotonic() + 60
        while not done.is_set() and time.monotonic() < deadline and not _flushed(run_dir):
            time.sleep(0.05)
        if not done.is_set():
            os.kill(os.getpid(), signal.SIGINT)

    saved = signal.signal(signal.SIGINT, raising)
    try:  # 2000 requests: seconds of steady load for the signal to land in, and a run that
        # ignored it ends by itself and fails here instead of hanging
        cfg = LoadConfig(endpoint=srv.base_url, model=FIXED_MODEL, concurrency=[4],
                         requests_per_step=2000, warmup_requests=1, input_tokens=8,
                         output_tokens=16, use_tokenize=False)
        threading.Thread(target=interrupt_once_flushed, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            run_load(cfg, run_dir, progress=False)
        assert signal.getsignal(signal.SIGINT) is raising
    finally:
        done.set()
        signal.signal(signal.SIGINT, saved)
        srv.stop()
    assert calls == []
    steady = read_records(run_dir, "steady_state_request_log")
    assert steady.num_rows >= 1 and (run_dir / "steady_state_request_log.parquet").exists()
    assert mf.load(run_dir / "manifest.json")["phases"]["steady"]["ended_at"] is not None


def _flushed(run_dir) -> bool:
    try:
        table = read_records(run_dir, "steady_state_request_log")
    except Exception:  # noqa: BLE001 - a stream caught mid-write: look again
        return False
    return table is not None and table.num_rows >= 1
