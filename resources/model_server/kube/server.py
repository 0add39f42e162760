"""The eks profile's model server: the candidate's engine (any of model_server/engines/ that
runs on Kubernetes: vLLM / SGLang on GPU, vLLM on Neuron) as a Kubernetes Deployment on its
node group. `engine_spec_for` maps a candidate (pipelines/candidates.yaml) to the engine's
manifest settings."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
from servingbench.resources.contract import settings
from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.contract.deployment import Replicated, SeveralModels, Single
from servingbench.resources.contract.scope import ClusterInfo
from servingbench.resources.contract.timestamps import format_ts
from servingbench.resources.http import control
from servingbench.resources.model_server import engines
from servingbench.resources.model_server.fleet.events import Events
from servingbench.resources.model_server.interface import Deployment, ModelServer
from servingbench.resources.model_server.kube.autoscale import unwired
from servingbench.resources.model_server.kube.client import KubeClient, RolloutError
from servingbench.resources.model_server.kube.coldstart import manifest_phases
from servingbench.resources.model_server.kube.deploy import EngineDeployment
from servingbench.resources.model_server.kube.events import RunEvents
from servingbench.resources.model_server.kube.models_deploy import deploy_models
from servingbench.resources.model_server.kube.models_deploy import refused as models_refused
from servingbench.resources.model_server.kube.render import PORT, EngineSpec
from servingbench.resources.model_server.kube.spot import SpotInterrupter
from servingbench.resources.model_server.launch_spec import launch_fields

# Where the load generator finds the engine's API key while the engine is deployed (the
# load generator reads keys from the environment only; removed again after the block).
LOAD_API_KEY_ENV = settings.setting("SERVINGBENCH_ENGINE_API_KEY").name
log = logging.getLogger("servingbench.kube")


def engine_spec_for(candidate: Candidate, run_id: str, nodegroup: str, **expose) -> EngineSpec:
    """The candidate's engine settings; a clear ValueError for what eks cannot run."""
    if not candidate.image_digest:
        raise ValueError(f"candidate {candidate.name}: image_digest is null; the eks profile "
                         f"needs the engine image pinned by digest (repo@sha256:…)")
    engine = engines.get(candidate.engine)
    if engine.where != "eks":
        raise ValueError(f"candidate {candidate.name}: engine {engine.name} runs on this host "
                         f"only (the local profile), not on eks")
    return EngineSpec(run_id=run_id, candidate=candidate.name, nodegroup=nodegroup,
                      image=candidate.image_digest, **launch_fields(candidate), **expose)


class KubeModelServer(ModelServer):
    """The candidate's engine as a Deployment on its node group; deleted after the block."""

    def __init__(self, kube: Callable[[], KubeClient], *, expose: str = "load_balancer",
                 source_ranges: tuple[str, ...] = (), lb_scheme: str = "internal",
                 allow_public: bool = False, owner: str | None = None,
                 run_as_user: int | None = None,
                 timeout_s: float = 3600.0, poll_s: float = 10.0,
                 clock: Callable[[], int] = time.time_ns, telemetry: tuple[dict, ...] = (),
                 prometheus_url: str = "", events_every_s: float = 10.0,
                 interruptions: Callable[[], Any] | None = None,
                 service_address: Callable[[str], tuple[str, int]] | None = None,
                 driver_namespace: str = "dagster"):
        self.kube, self.timeout_s, self.poll_s, self.clock = kube, timeout_s, poll_s, clock
        # a `models` candidate: where this process reaches a model's Service by its name
        # (None: its NLB or in-cluster DNS name, kube/models_deploy.py)
        self.service_address = service_address
        # where the run's pod runs (the Dagster runs' namespace): a swapped model's
        # NetworkPolicy admits the swap driver there alone (kube/models.py)
        self.driver_namespace = driver_namespace
        # a spot run's interruptions: makes the run's FisInterruptions (the eks profile, with
        # the FIS role); None: a candidate with `interruptions` is refused
        self.interruptions = interruptions
        # the in-cluster Prometheus a KEDA trigger queries (docs/eks.md, autoscaling)
        self.prometheus_url, self.events_every_s = prometheus_url, events_every_s
        self.telemetry = list(telemetry)  # DCGM exporter / neuron-monitor endpoints (docs/telemetry.md)
        self.expose = {"expose": expose, "source_ranges": tuple(source_ranges),
                       "lb_scheme": lb_scheme, "allow_public": allow_public, "owner": owner,
                       "run_as_user": run_as_user}

    def refuses(self, candidate: Candidate) -> str | None:
        """What the eks profile cannot run as planned, before its node group is made."""
        engine = engines.get(candidate.engine)
        if engine.where != "eks":
            return (f"engine: {engine.name} runs on this host only (the local profile), not "
                    "on eks")
        match candidate.deployment:
            case Single():
                return None
            case Replicated() as plan:
                if plan.interruptions is not None and self.interruptions is None:
                    return ("interruptions: need the FIS role (SERVINGBENCH_EKS_FIS_ROLE_ARN, "
                            "docs/spot.md)")
                return unwired(candidate.engine, plan)
            case SeveralModels():
                return models_refused(candidate, self.expose)
        raise TypeError(f"unknown deployment plan {candidate.deployment!r}")

    @contextlib.contextmanager
    def deploy(self, candidate: Candidate, cluster: ClusterInfo, run_dir: Path) -> Iterator[Deployment]:
        why = self.refuses(candidate)
        if why is not None:
            raise ValueError(f"candidate {candidate.name}: {why}")
        plan = candidate.deployment
        if isinstance(plan, SeveralModels):  # several models on the node
            spec = engine_spec_for(candidate, Path(run_dir).name, cluster.facts["nodegroup"],
                                   **self.expose)
            with deploy_models(self, candidate, spec, run_dir, LOAD_API_KEY_ENV) as dep:
                yield dep
            return
        run_id = Path(run_dir).name  # storage names each run folder by its run id
        spec = engine_spec_for(candidate, run_id, cluster.facts["nodegroup"], **self.expose)
        replicated = plan if isinstance(plan, Replicated) else None
        planned = None if replicated is None else replicated.interruptions
        kube = self.kube()
        dep = EngineDeployment(kube, spec, clock=self.clock,
                               replicas=None if replicated is None else replicated.replicas,
                               autoscaling=None if replicated is None else replicated.autoscaling,
                               prometheus_url=self.prometheus_url)
        auth = {"Authorization": f"Bearer {dep.api_key}"}
        os.environ[LOAD_API_KEY_ENV] = dep.api_key
        watch = None
        if writes_events(candidate):  # contract §2.6: runs whose nodes or replicas may change
            Path(run_dir).mkdir(parents=True, exist_ok=True)
            watch = EventPoller(RunEvents(kube, spec, cluster.facts["nodegroup"], self.clock,
                                          sink=Events(run_dir, run_id)), self.events_every_s)
        schedule = None
        if planned is not None:
            schedule = SpotInterrupter(self.interruptions(), run_id, Path(run_dir), planned.times(),
                                   notice=watch.notice if watch is not None else None,
                                   clock=self.clock)
        try:
            # the watch outlives the Deployment: its last poll sees the replicas stop
            with (watch or contextlib.nullcontext()), \
                    dep.deployed(timeout_s=self.timeout_s, poll_s=self.poll_s) as up:
                if watch is not None:
                    watch.poll()  # the first replicas' start-up, read now they are ready
                endpoint = up.endpoint
                if spec.expose == "load_balancer":
                    host = kube.wait_load_balancer(spec.name, timeout_s=self.timeout_s,
                                                   poll_s=self.poll_s)
                    endpoint = f"http://{host}:{PORT}"
                    self._wait_reachable(endpoint, auth)
                phases = {"deploy": {"started_at": format_ts(up.deploy[0]),
                                     "ended_at": format_ts(self.clock())},
                          **manifest_phases(up.phases)}
                with (schedule.running() if schedule is not None else contextlib.nullcontext()):
                    yield Deployment(
                        endpoint=endpoint, served_model=candidate.model,
                        facts={"engine": candidate.engine,
                               "engine_version": self._version(endpoint, auth),
                               "image_digest": candidate.image_digest},
                        phases=phases, emulated=False,
                        details={"pod": up.pod, "deployment": spec.name,
                                 "scheduling_s": _seconds(up.phases.get("scheduling")),
                                 # Neuron: were the compiled graphs found in the cache (hit / miss)
                                 "compile_cache": up.compile_cache},
                        api_key_env=LOAD_API_KEY_ENV,
                        telemetry=[{"kind": "engine_metrics", "url": f"{endpoint}/metrics"},
                                   *self.telemetry])
                if schedule is not None and schedule.errors:
                    raise RuntimeError("spot interruptions did not all start: "
                                       + "; ".join(schedule.errors))
        finally:
            os.environ.pop(LOAD_API_KEY_ENV, None)
            kube.close()

    def _wait_reachable(self, endpoint: str, auth: dict) -> None:
        """An NLB answers minutes after it has a name (DNS, target registration)."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                with httpx.Client(timeout=10, trust_env=False) as http:
                    r, _ = control.request(http, "GET", f"{endpoint}/v1/models", headers=auth,
                                           max_bytes=1 << 20, deadline_s=15)
                if r.status_code == 200:
                    return
            except (httpx.HTTPError, control.ControlError):
                pass
            if time.monotonic() >= deadline:
                raise RolloutError(f"{endpoint} not reachable within {self.timeout_s:.0f}s")
            time.sleep(self.poll_s)

    @staticmethod
    def _version(endpoint: str, auth: dict) -> str | None:
        try:
            with httpx.Client(timeout=5, trust_env=False) as http:
                r, body = control.request(http, "GET", f"{endpoint}/version", headers=auth,
                                          max_bytes=64 << 10, deadline_s=10)
            version = json.loads(body).get("version") if r.status_code == 200 else None
            return version if isinstance(version, str) else None
        except (httpx.HTTPError, control.ControlError, ValueError, AttributeError, RecursionError):
            return None


def writes_events(candidate: Candidate) -> bool:
    """Several replicas, autoscaling or spot capacity: the run writes events.parquet."""
    plan = candidate.deployment
    return candidate.capacity == "spot" or (
        isinstance(plan, Replicated) and (plan.autoscaling is not None or plan.replicas.max > 1))


class EventPoller:
    """Polls a RunEvents on a daemon thread while the block runs, and once more after it
    (the last replica's stop, the last node's going). A failed poll is logged, never fatal:
    the events describe the run, they do not run it."""

    def __init__(self, run: RunEvents, every_s: float):
        self.run, self.every_s = run, every_s
        self._stop, self._lock = threading.Event(), threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="kube-events", daemon=True)

    def poll(self) -> None:
        try:
            with self._lock:  # the thread's polls and the chain's never interleave
                self.run.poll()
        except Exception as exc:  # noqa: BLE001 - logged; the run goes on
            log.warning("node/replica events: poll failed: %s", exc)

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.poll()

    def notice(self, instance_id: str, at_ns: int) -> None:
        """A notice FIS reported (kube/spot.py), between polls, never during one."""
        with self._lock:
            self.run.notice(instance_id, at_ns)

    def __enter__(self) -> EventPoller:
        self.poll()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.poll()


def _seconds(span) -> float | None:
    return None if span is None else (span[1] - span[0]) / 1e9
