"""Fixtures: the emulator's fixed-timing mode as a real process on 127.0.0.1."""

from __future__ import annotations

import pytest

from tests.support.emulator import FixedTimingServer


@pytest.fixture
def start_server(tmp_path):
    started: list[FixedTimingServer] = []

    def start(*flags: str, ttft_ms: float = 20, itl_ms: float = 5) -> FixedTimingServer:
        s = FixedTimingServer(tmp_path, *flags, ttft_ms=ttft_ms, itl_ms=itl_ms)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def server(start_server) -> FixedTimingServer:
    """Fixed timing: TTFT 20 ms, ITL 2 ms."""
    return start_server(ttft_ms=20, itl_ms=2)
