"""moto's real S3 server on 127.0.0.1 (the run prefix the load pods write), dummy AWS
credentials (the fake Kubernetes API checks the EKS token made from them), and the
emulator's fixed-timing mode as the engine."""

from __future__ import annotations

import pytest

from tests.support.eks.aws import DUMMY_KEY_ID, DUMMY_SECRET, REGION, run_moto_server
from tests.support.emulator import FixedTimingServer


@pytest.fixture(scope="module")
def moto_s3_server():
    yield from run_moto_server()


@pytest.fixture
def s3_bucket(moto_s3_server, monkeypatch):
    import boto3
    import httpx

    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    env = {"AWS_ACCESS_KEY_ID": DUMMY_KEY_ID, "AWS_SECRET_ACCESS_KEY": DUMMY_SECRET,
           "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true",
           "AWS_ENDPOINT_URL": moto_s3_server,
           "AWS_CONFIG_FILE": "/nonexistent/servingbench-test-config",
           "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/servingbench-test-creds"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    httpx.post(f"{moto_s3_server}/moto-api/reset").raise_for_status()
    boto3.client("s3", endpoint_url=moto_s3_server, region_name=REGION,
                 aws_access_key_id=DUMMY_KEY_ID,
                 aws_secret_access_key=DUMMY_SECRET).create_bucket(Bucket="sb-runs")
    return "s3://sb-runs/prefix"


@pytest.fixture
def server(tmp_path):
    s = FixedTimingServer(tmp_path, ttft_ms=5, itl_ms=1)
    yield s
    s.stop()
