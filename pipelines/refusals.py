"""Ask the profile's model server about every candidate before anything starts: a candidate
whose deployment plan the server cannot run as written (a policy the profile does not run, a
gauge its engine does not serve, several models where the server serves one) is a
ConfigError naming the file, the candidate and the key, so `servingbench run` and `demo` exit
2 before Dagster is imported or a node is made. The chain asks the same server again before
it provisions (assets/cluster.py `preflight`), for runs started from the UI or a schedule.

Imports are inside the functions: the command checks its file in well under a second."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from servingbench.pipelines.config import ConfigError
from servingbench.resources.contract.candidate import Candidate


def model_server(profile: str):
    """The profile's model server as the assets receive it (pipelines/resources.py and
    eks_profile.py build the same), without Dagster. The eks one reaches nothing when built."""
    if profile == "eks":
        from servingbench.pipelines.eks_profile import EksResources, EksSettings

        try:
            settings = EksSettings.from_env(os.environ)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return EksResources.build(settings).pipeline_resources()["model_server"]
    from servingbench.resources.model_server.local import LocalModelServers
    from servingbench.resources.model_server.local.emulator import EmulatorModelServer

    return LocalModelServers(EmulatorModelServer())


def check(profile: str, path: Path, candidates: Iterable[Candidate]) -> None:
    """ConfigError for the first candidate the profile's model server refuses."""
    server = model_server(profile)
    for c in candidates:
        why = server.refuses(c)
        if why is not None:
            raise ConfigError(f"{path}: candidate {c.name}: {why}")
