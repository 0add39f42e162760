"""The profile's configurable resources as Dagster sees them: each a `ConfigurableResource`
whose config is what a run used, and which hands the assets the plain object of
`resources/` (which imports no Dagster). A value read from a SERVINGBENCH_* variable is an
`EnvVar`, so the UI's resource page names the variable rather than a copy of its value.

S3 goes through dagster-aws's `S3Resource` (region and endpoint from the usual AWS
variables, credentials from the usual chain): its boto3 client is handed to the run store
as a plain client (`Storage.s3`), which publishes run folders through it."""

from __future__ import annotations

import math
import os
from collections.abc import Collection, Mapping
from pathlib import Path

import dagster as dg
from dagster_aws.s3 import S3Resource
from servingbench.pipelines.config import ConfigError
from servingbench.resources.contract import settings as envvars
from servingbench.resources.model_server.emulator import EmulatorModelServer
from servingbench.resources.model_server.local import LocalModelServers
from servingbench.resources.storage.store import Storage


def from_env(name: str, value, read: Collection[str]):
    """`EnvVar(name)` when the value was read from that variable (`read`: the names the
    settings came from; the UI then shows where it came from), else the plain `value`."""
    if name in read:
        envvars.setting(name)  # a listed setting, or KeyError
        return dg.EnvVar(name)
    return value


def _text(value) -> str | None:
    return None if value is None else str(value)


def s3_resource(env: Mapping[str, str] | None = None) -> S3Resource:
    """The AWS SDK's own variables (region, an S3 endpoint such as MinIO's or moto's); the
    credentials are the usual chain's and never part of the config."""
    env = os.environ if env is None else env
    region = next((k for k in ("AWS_REGION", "AWS_DEFAULT_REGION") if env.get(k)), None)
    endpoint = next((k for k in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL") if env.get(k)), None)
    return S3Resource(region_name=dg.EnvVar(region) if region else None,
                      endpoint_url=dg.EnvVar(endpoint) if endpoint else None)


class StorageResource(dg.ConfigurableResource):
    """Run folders and the DuckDB store (resources/storage/store.py); finished run folders
    are published to `data_uri` through `s3`'s client."""

    data_dir: str
    data_uri: str | None = None
    s3: S3Resource

    def create_resource(self, context) -> Storage:
        uri = self.data_uri or None
        if uri and not uri.startswith("s3://"):
            raise ConfigError(f"SERVINGBENCH_DATA_URI={uri!r}: expected s3://bucket/prefix")
        return Storage(Path(self.data_dir), remote_uri=uri,
                       s3=self.s3.get_client() if uri else None)


class EmulatorResource(dg.ConfigurableResource):
    """The local profile's model servers: the engine emulator (its clock and cold start as
    configured) for cloud candidates, this host's llama.cpp for `engine: llama.cpp`."""

    time_scale: str = envvars.default("SERVINGBENCH_EMULATOR_TIME_SCALE")
    cold_start_s: str | None = None

    def create_resource(self, context) -> LocalModelServers:
        return LocalModelServers(EmulatorModelServer(
            time_scale=number("SERVINGBENCH_EMULATOR_TIME_SCALE", self.time_scale),
            cold_start_s=number("SERVINGBENCH_EMULATOR_COLD_START_S", self.cold_start_s)))


def number(name: str, text: str | None) -> float | None:
    """`text` as a finite number; ConfigError names the variable."""
    try:
        value = None if text in (None, "") else float(text)
    except ValueError:
        raise ConfigError(f"{name}={text!r}: expected a number") from None
    if value is not None and not math.isfinite(value):
        raise ConfigError(f"{name}={text!r}: expected a finite number")
    return value


def storage(data_dir: Path, data_uri: str | None, read: Collection[str] = (),
            env: Mapping[str, str] | None = None) -> StorageResource:
    return StorageResource(
        data_dir=from_env("SERVINGBENCH_DATA_DIR", str(data_dir), read),
        data_uri=from_env("SERVINGBENCH_DATA_URI", data_uri, read), s3=s3_resource(env))


def emulator(time_scale: float, cold_start_s: float | None,
             read: Collection[str] = ()) -> EmulatorResource:
    return EmulatorResource(
        time_scale=from_env("SERVINGBENCH_EMULATOR_TIME_SCALE", str(time_scale), read),
        cold_start_s=from_env("SERVINGBENCH_EMULATOR_COLD_START_S", _text(cold_start_s), read))
