"""Shared helpers live in tests/support (imported as `tests.support.…`); fixtures stay in
the conftest beside the tests that use them, except those several folders share (here)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def moto_server():
    """moto's real server on 127.0.0.1, started once per session (per xdist worker): the
    eks, fleet and loadjob tests each reset it before use (`/moto-api/reset`), so none
    sees another's buckets or clusters. Imported here, not above: moto is a heavy import
    that a run of other folders does not need."""
    from tests.support.eks.aws import run_moto_server

    yield from run_moto_server()
