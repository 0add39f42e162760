"""moto's real S3 server on 127.0.0.1 for the run-folder store; dummy credentials only."""

from __future__ import annotations

import pytest

from tests.support.eks.aws import fresh_s3_bucket


@pytest.fixture
def s3_bucket(moto_server, monkeypatch):
    return fresh_s3_bucket(moto_server, monkeypatch)
