"""Fixtures: the fixed-timing server as a real process on 127.0.0.1."""

from __future__ import annotations

import pytest

from tests.support.loadgen import ServerProcess


@pytest.fixture
def start_server(tmp_path):
    started: list[ServerProcess] = []

    def start(*args: str) -> ServerProcess:
        s = ServerProcess(tmp_path, list(args))
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def server(start_server) -> ServerProcess:
    """Fixed timing: TTFT 20 ms, ITL 2 ms."""
    return start_server("--ttft-ms", "20", "--itl-ms", "2")
