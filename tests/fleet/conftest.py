"""moto's real S3 server on 127.0.0.1 for the run-folder store; dummy credentials only."""

from __future__ import annotations

import pytest

from tests.support.eks.aws import fresh_s3_bucket, run_moto_server


@pytest.fixture(scope="module")
def moto_s3_server():
    yield from run_moto_server()


@pytest.fixture
def s3_bucket(moto_s3_server, monkeypatch):
    return fresh_s3_bucket(moto_s3_server, monkeypatch)
