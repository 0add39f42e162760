"""The `eks` profile's resources: real EKS node groups, Kubernetes deployments (vLLM / SGLang
on GPU, vLLM on Neuron) and Cost Explorer bills, configured by SERVINGBENCH_EKS_* variables
(docs/eks.md). Built when the definitions load; no AWS call is made until a run starts."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .config import ConfigError


@dataclass
class EksReaper:
    """Deletes servingbench node groups older than the TTL, so no node is ever forgotten."""
    cluster: object
    ttl_hours: float

    def reap(self) -> list[str]:
        return self.cluster.reap(self.ttl_hours * 3600)


def eks_resources(settings, candidates) -> dict:
    from resources.eks_profile import EksResources, EksSettings

    try:
        eks = EksResources.build(EksSettings.from_env(os.environ))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return eks.pipeline_resources() | {
        "reaper": EksReaper(eks.cluster, eks.settings.reaper_ttl_hours)}
