"""moto's real S3 server on 127.0.0.1 (the run prefix the load pods write), dummy AWS
credentials (the fake Kubernetes API checks the EKS token made from them), and the
emulator's fixed-timing mode as the engine."""

from __future__ import annotations

import pytest

from tests.support.eks.aws import fresh_s3_bucket
from tests.support.emulator import FixedTimingServer


@pytest.fixture
def s3_bucket(moto_server, monkeypatch):
    return fresh_s3_bucket(moto_server, monkeypatch)


@pytest.fixture
def server(tmp_path):
    s = FixedTimingServer(tmp_path, ttft_ms=5, itl_ms=1)
    yield s
    s.stop()
