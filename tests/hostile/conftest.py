"""Fixtures: the hostile server as a real process on 127.0.0.1."""

from __future__ import annotations

import pytest

from tests.support.hostile import HostileProcess


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """One server for the request-level matrix: each request picks its misbehaviour."""
    srv = HostileProcess(tmp_path_factory.mktemp("hostile"))
    yield srv
    srv.stop()


@pytest.fixture
def start_hostile(tmp_path):
    started: list[HostileProcess] = []

    def start(*args: str) -> HostileProcess:
        s = HostileProcess(tmp_path, *args)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
