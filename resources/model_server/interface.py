"""The model server a candidate is measured on: one interface, the emulator beside the real
deployments (vLLM / SGLang on GPU, vLLM on Neuron, in resources/model_server/kube).

`deploy` is a context manager: the server is up inside it and always stopped after it, also
when the measurement fails. `refuses` says, before anything is provisioned, why this server
cannot run a candidate's deployment plan (contract/deployment.py) as written: the assets and
the CLI ask it, and never look at which server they hold.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.contract.deployment import Replicated, SeveralModels, Single
from servingbench.resources.contract.scope import ClusterInfo


@dataclass
class Deployment:
    endpoint: str                   # base URL the load generator drives
    served_model: str               # the `model` field requests carry
    facts: dict                     # manifest keys: engine, engine_version, image_digest
    phases: dict = field(default_factory=dict)   # deploy and its sub-phases (contract §2.1)
    emulated: bool = False
    details: dict = field(default_factory=dict)  # metadata only (pid, config, ground truth)
    # the name of an environment variable of this process holding the engine's API key,
    # which the load generator sends as a bearer token (None: the engine needs none)
    api_key_env: str | None = None
    # what the telemetry sampler reads beside the load, as plain descriptions
    # (resources/telemetry: {"kind": "dcgm" | "engine_metrics" | "emulated" | …, "url"/"pid"})
    telemetry: list[dict] = field(default_factory=list)


class ModelServer(ABC):
    def refuses(self, candidate: Candidate) -> str | None:
        """Why this server cannot run `candidate` as planned, naming the key (None: it can).
        A server that serves more than one engine server overrides it; this one serves the
        plain plan only."""
        match candidate.deployment:
            case Single():
                return None
            case Replicated():
                return "replicas: this model server runs one replica"
            case SeveralModels():
                return "models: this model server serves one model"
        raise TypeError(f"unknown deployment plan {candidate.deployment!r}")

    @abstractmethod
    def deploy(self, candidate: Candidate, cluster: ClusterInfo, run_dir: Path) -> contextlib.AbstractContextManager[Deployment]:
        ...
