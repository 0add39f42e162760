"""EmulatorProcess: run the emulator as a subprocess for tests and the pipeline.

    with EmulatorProcess(["--time-scale", "0.01", "--seed", "1"]) as emu:
        httpx.get(emu.base_url + "/health")

Starts `sys.executable -m servingbench.emulator ARGS --port 0 --port-file <tmp>`, waits for the
port file and for /health 200, and on exit (also on exception) sends SIGTERM, then
SIGKILL after 5 s, and reaps the process. If this process dies without stopping it (kill -9),
the emulator notices within a fraction of a second (`--parent-pid`) and exits: no orphan.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path


class EmulatorStartError(RuntimeError):
    """The emulator exited or did not become ready in time; carries its stderr."""

    def __init__(self, message: str, returncode: int | None, stderr: str):
        super().__init__(f"{message} (exit code {returncode}): {stderr.strip()[-2000:]}")
        self.returncode, self.stderr = returncode, stderr


class EmulatorProcess:
    def __init__(self, args: list[str], ready_timeout_s: float = 30, host: str = "127.0.0.1"):
        self.args, self.ready_timeout_s, self.host = list(args), ready_timeout_s, host
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self._dir: tempfile.TemporaryDirectory | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __enter__(self) -> EmulatorProcess:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="servingbench-emu-")
        port_file = Path(self._dir.name) / "port"
        self._stderr = open(Path(self._dir.name) / "stderr", "w+b")  # noqa: SIM115
        # --parent-pid: the emulator stops by itself if this process dies, even by SIGKILL
        cmd = [sys.executable, "-m", "servingbench.emulator", *self.args, "--host", self.host,
               "--port", "0", "--port-file", str(port_file), "--parent-pid", str(os.getpid())]
        root = str(Path(__file__).resolve().parent.parent)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self._stderr, env=env)
        deadline = time.monotonic() + self.ready_timeout_s
        try:
            while True:
                if self.proc.poll() is not None:
                    raise EmulatorStartError("emulator exited during start", self.proc.returncode,
                                             self._read_stderr())
                if self.port is None and port_file.exists():
                    self.port = int(port_file.read_text())
                if self.port is not None and self._health() == 200:
                    return
                if time.monotonic() > deadline:
                    raise EmulatorStartError(f"emulator not ready after {self.ready_timeout_s} s",
                                             None, self._read_stderr())
                time.sleep(0.02)
        except BaseException:
            self.stop()
            raise

    def _read_stderr(self) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def _health(self) -> int | None:
        try:
            with urllib.request.urlopen(self.base_url + "/health", timeout=2) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return None

    def status(self) -> dict:
        with urllib.request.urlopen(self.base_url + "/servingbench/status", timeout=5) as resp:
            return json.loads(resp.read())

    def stop(self) -> int | None:
        """SIGTERM, SIGKILL after 5 s; returns the exit code."""
        rc = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            rc = self.proc.returncode
        if self._dir is not None:
            self._stderr.close()
            self._dir.cleanup()
            self._dir = None
        return rc
