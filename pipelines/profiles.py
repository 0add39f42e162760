"""The one place that picks resources: `local` (the embedded default) or `eks`.

Settings come from the caller (the demo, tests) or, for the Dagster UI and schedules, from
SERVINGBENCH_PROFILE / SERVINGBENCH_DATA_DIR / SERVINGBENCH_CANDIDATES (and, for the
emulator, SERVINGBENCH_EMULATOR_TIME_SCALE / SERVINGBENCH_EMULATOR_COLD_START_S), read when
the definitions load — never at import time. The eks profile's settings and wiring are
pipelines/eks_profile.py's, shown in Dagster by pipelines/resources.py.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
from servingbench.pipelines import eks_profile
from servingbench.pipelines import resources as dagster_resources
from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.config import DEFAULT_FILE, REPO, ConfigError
from servingbench.pipelines.eks_profile import EksResources, EksSettings
from servingbench.resources import billing
from servingbench.resources.analysis.metrics import DEFAULT_SLO
from servingbench.resources.cluster.local import LocalHostCluster
from servingbench.resources.cluster.reaper import NothingToReap
from servingbench.resources.contract import settings as envvars
from servingbench.resources.loadgen.generator import LoadGenerator
from servingbench.resources.loadjob.generator import KubeJobLoadGenerator

PROFILES = ("local", "eks")
# the bill source each profile bills with, by its name (resources/billing finds the file that
# defines it): the embedded default prices its steady phase at the price sheet's rate; eks
# reads the run's Cost Explorer bill
BILL_SOURCE = {"local": "price_sheet", "eks": eks_profile.BILL_SOURCE}


@dataclass(frozen=True)
class Settings:
    profile: str = envvars.default("SERVINGBENCH_PROFILE")
    data_dir: Path = REPO / "data"
    candidates_file: Path = DEFAULT_FILE
    # emulator clock (1.0: the modelled hardware's speed)
    time_scale: float = float(envvars.default("SERVINGBENCH_EMULATOR_TIME_SCALE"))
    cold_start_s: float | None = None       # emulator cold start override (None: modelled)
    load: LoadGenerator = field(default_factory=LoadGenerator)
    slos: tuple[tuple[float, float], ...] = (DEFAULT_SLO,)
    data_uri: str | None = None             # s3://bucket/prefix: where finished runs are published
    # the SERVINGBENCH_* variables these settings were read from (from_env): the Dagster
    # resources name them (pipelines/resources.py)
    read_from: frozenset[str] = frozenset()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """From the SERVINGBENCH_* variables (resources/contract/settings.py lists them)."""
        env = os.environ if env is None else env

        def number(name: str):
            text = envvars.get(name, env)
            try:
                value = None if text is None else float(text)
            except ValueError:
                raise ConfigError(f"{name}={text!r}: expected a number") from None
            if value is not None and not math.isfinite(value):
                raise ConfigError(f"{name}={text!r}: expected a finite number")
            return value

        return cls(profile=envvars.get("SERVINGBENCH_PROFILE", env),
                   data_dir=Path(envvars.get("SERVINGBENCH_DATA_DIR", env) or cls.data_dir),
                   candidates_file=Path(envvars.get("SERVINGBENCH_CANDIDATES", env)
                                        or cls.candidates_file),
                   time_scale=number("SERVINGBENCH_EMULATOR_TIME_SCALE"),
                   cold_start_s=number("SERVINGBENCH_EMULATOR_COLD_START_S"),
                   data_uri=envvars.get("SERVINGBENCH_DATA_URI", env),
                   read_from=frozenset(s.name for s in envvars.SETTINGS if env.get(s.name)))


def resources_for(settings: Settings) -> dict:
    if settings.profile not in PROFILES:
        raise ConfigError(f"profile {settings.profile!r}: expected one of {PROFILES}")
    candidates = {c.name: c for c in load_candidates(settings.candidates_file)}
    if settings.data_uri and not settings.data_uri.startswith("s3://"):
        raise ConfigError(f"SERVINGBENCH_DATA_URI={settings.data_uri!r}: expected s3://bucket/prefix")
    common = {
        "storage": dagster_resources.storage(settings.data_dir, settings.data_uri,
                                             settings.read_from),
        "candidates": candidates,
        "load_generator": settings.load,
        "slos": settings.slos,
        "io_manager": dg.FilesystemIOManager(base_dir=str(Path(settings.data_dir) / "dagster_io")),
    }
    if settings.profile == "local":
        return common | {
            "cluster": LocalHostCluster(),
            "model_server": dagster_resources.emulator(settings.time_scale,
                                                       settings.cold_start_s, settings.read_from),
            "bill_source": billing.build(BILL_SOURCE["local"]),
            "reaper": NothingToReap(),
        }
    try:
        checked = EksSettings.from_env(os.environ)  # a bad or missing value fails the load
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    # cluster, model_server, bill_source and reaper as Dagster resources whose config is the
    # SERVINGBENCH_EKS_* variables (EnvVar), built when a run starts
    return common | dagster_resources.eks(os.environ, checked) | _load_pods(
        dagster_resources.eks_built(checked), settings, os.environ)


def _load_pods(eks: EksResources, settings: Settings, env: Mapping[str, str]) -> dict:
    """With SERVINGBENCH_EKS_LOAD_PODS > 0 the load comes from an Indexed Job of that many
    pods (resources/loadjob/), which write their shards to SERVINGBENCH_DATA_URI."""
    s = eks.settings
    if s.load_pods == 0:
        return {}
    if not settings.data_uri:
        raise ConfigError("SERVINGBENCH_EKS_LOAD_PODS needs SERVINGBENCH_DATA_URI=s3://bucket/prefix:"
                          " the load pods write their shards there")
    if not s.load_image:
        raise ConfigError("SERVINGBENCH_EKS_LOAD_PODS needs SERVINGBENCH_EKS_LOAD_IMAGE, the "
                          "project's image pinned by digest (repo@sha256:…)")
    if s.expose != "cluster_ip":
        raise ConfigError("SERVINGBENCH_EKS_LOAD_PODS needs SERVINGBENCH_EKS_EXPOSE=cluster_ip: "
                          "the load pods reach the engine inside the cluster")
    pod_env = [("AWS_REGION", s.region)] + [
        (k, env[k]) for k in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL") if env.get(k)]
    return {"load_generator": KubeJobLoadGenerator(
        kube=eks.kube, image=s.load_image, data_uri=settings.data_uri, pods=s.load_pods,
        base=settings.load, namespace=s.namespace, owner=s.owner,
        service_account=s.load_service_account, node_selector=s.load_node_selector,
        tolerations=s.load_tolerations, cpu=s.load_cpu, start_delay_s=s.load_start_delay_s,
        env=tuple(pod_env))}
