"""The hostile server (tests/support/hostile_server.py) as a real process on 127.0.0.1, and
the scan for secrets in everything a run wrote."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.support.hostile_server import LEAK_SECRETS
from tests.support.net import stop_process, wait_port_file

SERVER = Path(__file__).with_name("hostile_server.py")
API_KEY_ENV = "SB_HOSTILE_TEST_KEY"
API_KEY = "sb-hostile-test-key-0123456789abcdef"


class HostileProcess:
    def __init__(self, tmp: Path, *args: str) -> None:
        stamp = time.monotonic_ns()
        self.port_file = tmp / f"hostile-port-{stamp}"
        self.seen_file = tmp / f"hostile-seen-{stamp}"
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--port-file", str(self.port_file),
             "--seen", str(self.seen_file), *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.port = wait_port_file(self.port_file, self.proc)
        self.base_url = f"http://127.0.0.1:{self.port}"

    def seen(self) -> dict[str, str]:
        """Request id -> misbehaviour, for every measured request that reached the server."""
        if not self.seen_file.exists():
            return {}
        return dict(x.split(" ", 1) for x in self.seen_file.read_text().splitlines()
                    if x and not x.startswith("- "))

    def calls(self) -> list[str]:
        """The sleep-mode and health calls (`/wake_up`, `/health?…`) that reached the server,
        in order."""
        if not self.seen_file.exists():
            return []
        return [x[2:] for x in self.seen_file.read_text().splitlines() if x.startswith("- ")]

    def stop(self) -> None:
        stop_process(self.proc)


def needles() -> dict[str, str]:
    """Every secret a hostile run may meet: the API key and what the server echoes."""
    return {"api key": API_KEY, **LEAK_SECRETS}


def leaks(run_dir: Path, extra: dict[str, str] | None = None) -> list[str]:
    """`what leaked into where` for every secret found in any file under `run_dir` (and in
    the `extra` texts, e.g. captured stderr). Binary files are read byte for byte."""
    found = []
    places = {str(p.relative_to(run_dir)): p.read_bytes().decode("latin-1")
              for p in sorted(run_dir.rglob("*")) if p.is_file()}
    places.update(extra or {})
    for where, text in places.items():
        for what, secret in needles().items():
            if secret in text:
                found.append(f"{what} leaked into {where}")
    return found
