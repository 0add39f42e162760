"""The profile's configurable resources as Dagster sees them: each a `ConfigurableResource`
whose config is what a run used, and which hands the assets the plain object of
`resources/` (which imports no Dagster). A value read from a SERVINGBENCH_* variable is an
`EnvVar`, so the UI's resource page names the variable rather than a copy of its value.

S3 goes through dagster-aws's `S3Resource` (region and endpoint from the usual AWS
variables, credentials from the usual chain): its boto3 client is handed to the run store
as a plain client (`Storage.s3`), which publishes run folders through it.

The eks profile's `cluster`, `model_server`, `bill_source` and `reaper` each hold
`EksProfileResource`, whose config is every SERVINGBENCH_EKS_* variable the run read; they
hand the assets the plain objects pipelines/eks_profile.py builds from it."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Collection, Mapping
from pathlib import Path

import dagster as dg
from dagster_aws.s3 import S3Resource
from servingbench.pipelines.config import ConfigError
from servingbench.pipelines.eks_profile import EksResources, EksSettings
from servingbench.resources.contract import settings as envvars
from servingbench.resources.model_server.local import LocalModelServers
from servingbench.resources.model_server.local.emulator import EmulatorModelServer
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


# EksProfileResource's config fields and the variable each mirrors (resources/contract/
# settings.py lists them; EksSettings.from_env reads and checks them)
EKS_FIELDS = {name.removeprefix("SERVINGBENCH_EKS_").lower(): name
              for name in (s.name for s in envvars.SETTINGS if s.scope == "eks")}


class EksProfileResource(dg.ConfigurableResource):
    """The eks profile's settings as a run used them (docs/eks.md): each field is the
    SERVINGBENCH_EKS_* variable of its name, unset fields take the variable's default.
    Checked by the same rules as at load (EksSettings.from_env), so a bad value names its
    variable."""

    cluster: str
    region: str
    node_role_arn: str
    owner: str
    subnets: str | None = None
    capacity_type: str | None = None
    capacity_reservation_id: str | None = None
    fis_role_arn: str | None = None
    expose: str | None = None
    source_ranges: str | None = None
    lb_scheme: str | None = None
    allow_public: str | None = None
    run_namespace: str | None = None
    run_as_user: str | None = None
    dcgm_url: str | None = None
    neuron_monitor_url: str | None = None
    load_pods: str | None = None
    load_image: str | None = None
    load_node_selector: str | None = None
    load_tolerations: str | None = None
    load_service_account: str | None = None
    load_cpu: str | None = None
    load_start_delay_s: str | None = None

    def eks_settings(self) -> EksSettings:
        env = {name: getattr(self, f) for f, name in EKS_FIELDS.items()
               if getattr(self, f) is not None}
        try:
            return EksSettings.from_env(env)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def built(self) -> EksResources:
        return eks_built(self.eks_settings())


@functools.lru_cache(maxsize=8)
def eks_built(settings: EksSettings) -> EksResources:
    """One session and one AWS call counter per settings in a process, shared by the
    resources a run builds from them (as when they were built once at load)."""
    return EksResources.build(settings)


class EksClusterResource(dg.ConfigurableResource):
    """The candidate's EKS node group (resources/cluster/eks.py)."""

    eks: EksProfileResource

    def create_resource(self, context):
        return self.eks.built().pipeline_resources()["cluster"]


class EksModelServerResource(dg.ConfigurableResource):
    """The engine as a Kubernetes Deployment on the node group (model_server/kube/)."""

    eks: EksProfileResource

    def create_resource(self, context):
        return self.eks.built().pipeline_resources()["model_server"]


class EksBillResource(dg.ConfigurableResource):
    """The run's Cost Explorer bill (resources/billing/cost_explorer.py)."""

    eks: EksProfileResource

    def create_resource(self, context):
        return self.eks.built().pipeline_resources()["bill_source"]


class EksReaperResource(dg.ConfigurableResource):
    """This installation's reaper: expired node groups and the runs' Kubernetes objects."""

    eks: EksProfileResource
    ttl_hours: float

    def create_resource(self, context):
        return self.eks.built().reaper(self.ttl_hours)


def eks(env: Mapping[str, str], checked: EksSettings) -> dict:
    """The eks profile's four resources; `checked`: the settings already read from `env`
    (their check is what fails a bad value at load)."""
    profile = EksProfileResource(**{f: dg.EnvVar(name) for f, name in EKS_FIELDS.items()
                                    if env.get(name)})
    return {"cluster": EksClusterResource(eks=profile),
            "model_server": EksModelServerResource(eks=profile),
            "bill_source": EksBillResource(eks=profile),
            "reaper": EksReaperResource(eks=profile, ttl_hours=checked.reaper_ttl_hours)}
