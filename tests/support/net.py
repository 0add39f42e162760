"""Loopback plumbing the tests share: a free port, and waiting for a server process to say
where it listens (its port file) without outliving it."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    """A port free on 127.0.0.1 right now (for servers that cannot bind port 0 and report)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port_file(path: Path, proc: subprocess.Popen, timeout_s: float = 15.0) -> int:
    """The port a server wrote to `path`; fails at once, with its stderr, if it exits first."""
    deadline = time.monotonic() + timeout_s
    while not path.exists() or not path.read_text().strip():
        if proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            raise RuntimeError(f"server exited ({proc.returncode}) before listening: {err}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"server wrote no port file within {timeout_s:.0f}s")
        time.sleep(0.01)
    return int(path.read_text())


def stop_process(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after `grace_s`: a test server never outlives its test."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
