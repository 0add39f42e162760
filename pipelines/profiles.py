"""The one place that picks resources: `local` (the embedded default) or `eks`.

Settings come from the caller (the demo, tests) or, for the Dagster UI and schedules, from
SERVINGBENCH_PROFILE / SERVINGBENCH_DATA_DIR / SERVINGBENCH_CANDIDATES (and, for the
emulator, SERVINGBENCH_EMULATOR_TIME_SCALE / SERVINGBENCH_EMULATOR_COLD_START_S), read when
the definitions load — never at import time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

from resources.bill_source import PriceSheetBill
from resources.cluster import LocalHostCluster
from resources.load import LoadSettings
from resources.model_server import EmulatorModelServer, ModelServer
from resources.storage import Storage

from .config import DEFAULT_FILE, REPO, ConfigError, load_candidates

PROFILES = ("local", "eks")


@dataclass(frozen=True)
class Settings:
    profile: str = "local"
    data_dir: Path = REPO / "data"
    candidates_file: Path = DEFAULT_FILE
    time_scale: float = 1.0                 # emulator clock (1.0: the modelled hardware's speed)
    cold_start_s: float | None = None       # emulator cold start override (None: modelled)
    load: LoadSettings = field(default_factory=LoadSettings)
    slos: tuple[tuple[float, float], ...] = ((2.0, 0.1),)

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ

        def number(name: str, default):
            text = env.get(name)
            try:
                return default if text in (None, "") else float(text)
            except ValueError:
                raise ConfigError(f"{name}={text!r}: expected a number") from None

        return cls(profile=env.get("SERVINGBENCH_PROFILE", "local"),
                   data_dir=Path(env.get("SERVINGBENCH_DATA_DIR", REPO / "data")),
                   candidates_file=Path(env.get("SERVINGBENCH_CANDIDATES", DEFAULT_FILE)),
                   time_scale=number("SERVINGBENCH_EMULATOR_TIME_SCALE", 1.0),
                   cold_start_s=number("SERVINGBENCH_EMULATOR_COLD_START_S", None))


class LocalModelServers(ModelServer):
    """The local profile's model server: the real llama.cpp engine for `engine: llama.cpp`
    candidates, the emulator for every other (cloud) candidate."""

    def __init__(self, emulator: ModelServer, llamacpp: ModelServer | None = None):
        self.emulator = emulator
        self.llamacpp = llamacpp

    def deploy(self, candidate, cluster, run_dir: Path):
        if candidate.engine == "llama.cpp":
            if self.llamacpp is None:
                from resources.model_server.llamacpp import LlamaCppModelServer
                self.llamacpp = LlamaCppModelServer()
            return self.llamacpp.deploy(candidate, cluster, run_dir)
        return self.emulator.deploy(candidate, cluster, run_dir)


class NothingToReap:
    """The local profile creates no cloud resource, so the reaper has nothing to delete."""

    def reap(self) -> list[str]:
        return []


def resources_for(settings: Settings) -> dict:
    if settings.profile not in PROFILES:
        raise ConfigError(f"profile {settings.profile!r}: expected one of {PROFILES}")
    candidates = {c.name: c for c in load_candidates(settings.candidates_file)}
    common = {
        "storage": Storage(Path(settings.data_dir)),
        "candidates": candidates,
        "load_settings": settings.load,
        "slos": settings.slos,
        "io_manager": dg.FilesystemIOManager(base_dir=str(Path(settings.data_dir) / "dagster_io")),
    }
    if settings.profile == "local":
        return common | {
            "cluster": LocalHostCluster(),
            "model_server": LocalModelServers(EmulatorModelServer(
                time_scale=settings.time_scale, cold_start_s=settings.cold_start_s)),
            "bill_source": PriceSheetBill(),
            "reaper": NothingToReap(),
        }
    from .eks_profile import eks_resources

    return common | eks_resources(settings, candidates)
