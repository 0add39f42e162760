"""Fixtures: moto's real server on 127.0.0.1 (tests/conftest.py starts it once), reset
before each test, with dummy credentials only."""

from __future__ import annotations

import boto3
import pytest

from tests.support.eks.aws import (
    DUMMY_KEY_ID,
    DUMMY_SECRET,
    DUMMY_SESSION_TOKEN,
    REGION,
    reset_moto,
    teach_moto_nodegroup_tags,
)


@pytest.fixture
def aws_env(monkeypatch):
    """Dummy credentials in the environment; nothing real can be reached with them."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DUMMY_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DUMMY_SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", DUMMY_SESSION_TOKEN)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/servingbench-test-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/servingbench-test-creds")


@pytest.fixture(scope="session")
def shared_session():
    """One boto3 session for the module's tests: botocore parses each service model once
    per session (EC2's is large), so sharing it keeps the suite fast. Dummy keys only."""
    return boto3.Session(aws_access_key_id=DUMMY_KEY_ID, aws_secret_access_key=DUMMY_SECRET,
                         aws_session_token=DUMMY_SESSION_TOKEN, region_name=REGION)


@pytest.fixture
def moto(moto_server, aws_env, shared_session, monkeypatch):
    """A reset moto server and a boto3 session pointed at it."""
    teach_moto_nodegroup_tags(monkeypatch)
    reset_moto(moto_server)
    return moto_server, shared_session
