"""A local chain run (`servingbench run`) as a real subprocess, for signal tests: watch it
reach a phase, signal it, then find what it left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
CANDIDATE = "g6e-signals"
HOLD = Path(__file__).with_name("hold")  # its sitecustomize holds a phase on request


def candidates_file(tmp: Path, requests_per_step: int) -> Path:
    path = tmp / "candidates.yaml"
    path.write_text(
        f"candidates:\n  - {{name: {CANDIDATE}, instance_type: g6e.48xlarge, "
        "model: meta-llama/Llama-4-Scout-17B-16E-Instruct, precision: bf16, tensor_parallel: 8, "
        "scenario: {input_tokens: 64, output_tokens: 16, dataset: null}, "
        f"load: {{concurrency: [2], requests_per_step: {requests_per_step}, warmup_requests: 1}}, "
        f"price: {{sheet: {REPO / 'pipelines' / 'price_sheet.yaml'}}}}}\n")
    return path


class ChainRun:
    """`servingbench run --candidate CANDIDATE` on the local profile in its own session."""

    def __init__(self, tmp: Path, *, cold_start_s: float, requests_per_step: int,
                 hold: str | None = None):
        self.tmp, self.data = tmp, tmp / "data"
        self.held = tmp / "held"  # written by the hold (tests/support/hold) once it holds
        (tmp / "home").mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SERVINGBENCH_", "SBTEST_"))}
        env.update(DAGSTER_HOME=str(tmp / "home"), SERVINGBENCH_DATA_DIR=str(self.data),
                   SERVINGBENCH_CANDIDATES=str(candidates_file(tmp, requests_per_step)),
                   SERVINGBENCH_EMULATOR_TIME_SCALE="0.5",
                   SERVINGBENCH_EMULATOR_COLD_START_S=str(cold_start_s))
        if hold:  # stop inside that phase's own code (provision, bill) until signalled
            env.update(SBTEST_HOLD=hold, SBTEST_HOLD_MARK=str(self.held),
                       PYTHONPATH=os.pathsep.join(x for x in (str(HOLD), env.get("PYTHONPATH")) if x))
        self.log = open(tmp / "output.txt", "w")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [str(REPO / ".venv/bin/servingbench"), "run", "--candidate", CANDIDATE,
             "--date", "2026-11-29"], env=env, cwd=tmp, stdout=self.log,
            stderr=subprocess.STDOUT, start_new_session=True)
        self.emulators: list[psutil.Process] = []

    def run_dir(self) -> Path | None:
        runs = sorted((self.data / "runs").glob("*")) if (self.data / "runs").exists() else []
        return runs[0] if runs else None

    def manifest_phases(self) -> dict:
        d = self.run_dir()
        try:
            return json.loads((d / "manifest.json").read_text())["phases"] if d else {}
        except (OSError, ValueError, KeyError):
            return {}

    def _watch_children(self) -> None:
        try:
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                if child not in self.emulators and "emulator" in " ".join(child.cmdline()):
                    self.emulators.append(child)
        except psutil.Error:
            pass

    def wait_until(self, what: str, ready, limit_s: float = 240) -> None:
        """Poll until `ready()` (bounded: a run that never gets there fails the test)."""
        deadline = time.monotonic() + limit_s
        while not ready():
            self._watch_children()
            if self.proc.poll() is not None:
                raise AssertionError(f"the run ended (rc {self.proc.returncode}) before {what}:\n"
                                     + (self.tmp / "output.txt").read_text()[-3000:])
            if time.monotonic() > deadline:
                raise AssertionError(f"the run did not reach {what} within {limit_s:.0f} s")
            time.sleep(0.05)
        self._watch_children()

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def wait(self, limit_s: float = 120) -> int:
        try:
            return self.proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise AssertionError(f"the run did not end within {limit_s:.0f} s of the signal:\n"
                                 + (self.tmp / "output.txt").read_text()[-3000:]) from None
        finally:
            self.log.close()

    def orphans(self, limit_s: float = 15) -> list[psutil.Process]:
        """Emulators still running `limit_s` after the run ended (none expected)."""
        _, alive = psutil.wait_procs(self.emulators, timeout=limit_s)
        for p in alive:  # never leave one behind, whatever the test says
            p.kill()
        return alive
