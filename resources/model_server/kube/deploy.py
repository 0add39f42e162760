"""Deploy one candidate's engine: apply, wait for readiness, read cold-start phases, delete.

The load generator reaches the engine at `DeployedEngine.endpoint`, the Service's
in-cluster DNS name; run it as an in-cluster Job, or port-forward (docs/eks.md).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from servingbench.resources.contract.deployment import Autoscaling, Replicas
from servingbench.resources.model_server.kube.autoscale import autoscaler, with_replicas
from servingbench.resources.model_server.kube.client import KubeClient, KubeError
from servingbench.resources.model_server.kube.coldstart import Span, cold_start_phases
from servingbench.resources.model_server.kube.events import compile_cache
from servingbench.resources.model_server.kube.render import PORT, EngineSpec, api_key_secret, render

log = logging.getLogger("servingbench.kube")


def delete_in_reverse(kube: KubeClient, objects: list[dict], what: str) -> None:
    """Delete `objects` in the reverse of the order they were applied. Each gets its delete
    even when an earlier one fails; the failures are raised together afterwards, naming
    every object that could not be deleted (`what`: whose teardown, for the message)."""
    failed: list[str] = []
    for obj in reversed(objects):
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        try:
            kube.delete(obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"])
        except Exception as exc:  # noqa: BLE001 - the rest still gets deleted
            log.warning("delete %s failed: %s", name, exc)
            failed.append(f"{name}: {exc}")
    if failed:
        raise KubeError(f"{what} teardown incomplete (the reaper removes what is left): "
                        + "; ".join(failed))


@dataclass
class DeployedEngine:
    name: str
    pod: str | None
    endpoint: str
    phases: dict[str, Span]  # cold-start sub-phases (ns spans) or None when unknown
    deploy: tuple[int, int]  # apply → ready, wall clock ns
    compile_cache: str | None = None  # Neuron: hit | miss from the engine log; None unknown


class EngineDeployment:
    """The engine of one candidate on its node group: its API-key Secret, NetworkPolicy,
    Deployment, Service and, for an autoscaled candidate, its ScaledObject or HPA (applied
    in that order, deleted in the reverse one). The API key
    is new for every deployment and lives only in the Secret and in this process."""

    def __init__(self, kube: KubeClient, spec: EngineSpec,
                 clock: Callable[[], int] = time.time_ns, *, replicas: Replicas | None = None,
                 autoscaling: Autoscaling | None = None, prometheus_url: str = ""):
        self.kube, self.spec, self.clock = kube, spec, clock
        self.api_key = secrets.token_urlsafe(32)
        deployment, service, policy = render(spec)
        if replicas is not None:
            with_replicas(deployment, replicas)
        if autoscaling is not None and autoscaling.policy == "keda" and not prometheus_url:
            raise ValueError("autoscaling policy keda needs the Prometheus URL its trigger reads")
        scaler = autoscaler(spec, replicas or Replicas(), autoscaling, prometheus_url)
        # the autoscaler last: applied once its Deployment exists, deleted first (it must
        # stop scaling before the Deployment goes)
        self.objects = [api_key_secret(spec, self.api_key), policy, deployment, service,
                        *([scaler] if scaler else [])]

    def __repr__(self) -> str:  # never the key
        return f"EngineDeployment({self.spec.name!r})"

    @property
    def endpoint(self) -> str:
        return f"http://{self.spec.name}.{self.spec.namespace}.svc.cluster.local:{PORT}"

    def apply(self) -> None:
        for obj in self.objects:
            self.kube.apply(obj)

    def wait(self, started_ns: int, *, timeout_s: float, poll_s: float = 5.0) -> DeployedEngine:
        """Wait for readiness, then read the pod's conditions, events and log."""
        self.kube.wait_ready(self.spec.name, timeout_s=timeout_s, poll_s=poll_s)
        ready_ns = self.clock()
        selector = f"app.kubernetes.io/instance={self.spec.name}"
        pods = self.kube.list("Pod", label_selector=selector)
        pod = pods[0] if pods else None
        phases: dict[str, Span] = {}
        cache = None
        if pod is not None:
            name = pod["metadata"]["name"]
            events = self.kube.list("Event", field_selector=f"involvedObject.name={name}")
            lines = self.kube.pod_log(name, "engine")
            phases = cold_start_phases(pod, events, lines, self.spec.runtime.name)
            cache = compile_cache(lines, self.spec.runtime.name)
        log.info("engine %s ready; phases %s", self.spec.name,
                 {k: (None if v is None else round((v[1] - v[0]) / 1e9, 1)) for k, v in phases.items()})
        return DeployedEngine(self.spec.name, pod and pod["metadata"]["name"], self.endpoint,
                              phases, (started_ns, ready_ns), cache)

    def delete(self) -> None:
        """Delete the Service, the Deployment, the NetworkPolicy and the Secret; missing ones
        are fine. Every object gets its delete even when an earlier one fails (a Service the
        API would not delete must not leave the GPU Deployment running); the first failure
        is raised afterwards, naming every object that could not be deleted."""
        delete_in_reverse(self.kube, self.objects, "engine")

    @contextmanager
    def deployed(self, *, timeout_s: float = 3600.0, poll_s: float = 5.0) -> Iterator[DeployedEngine]:
        """Deployed and ready for the block; deleted however the block ends."""
        started = self.clock()
        try:
            self.apply()
            yield self.wait(started, timeout_s=timeout_s, poll_s=poll_s)
        finally:
            self.delete()
