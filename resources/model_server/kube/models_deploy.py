"""A candidate with several models on one node (its `models`) on the eks profile: the
engines kube/models.py renders (one vLLM Deployment, Service and NetworkPolicy per model,
pinned to the node group's node), one endpoint in front of them that routes by the
request's `model`, and the swaps between the swapped ones.

* Deploy, one model at a time in the order listed: apply its NetworkPolicy, Deployment and
  Service, wait until it is ready and its Service answers `/health` → `model_load`
  (`value` the seconds from apply until then, `at` then). A swapped model that is not the last swapped one is put to sleep once ready
  (`POST /sleep?level=N`, timed → `model_sleep`) before the next engine is applied: vLLM
  starts an engine only where its `--gpu-memory-utilization` is free, and the fit check
  lets swapped models share memory that only one of them holds awake. The last swapped
  model stays awake.
* Route: the swap driver (model_server/swap/driver.py, in a process of its own, swap/process.py,
  as on the emulator) listens on 127.0.0.1 in the run's process's host, with every model's
  Service as its upstream (no `model=` query: each Service is one engine). It routes every
  request by its body's `model` and swaps before a request for a sleeping model
  (`model_sleep` / `model_wake`), for resident-only models too (then it only routes).
* Reach: this process talks to each model's Service directly — a resident model's NLB
  (`expose: load_balancer`, one per model) or its in-cluster DNS name (`cluster_ip`), a
  swapped model's in-cluster DNS name always. A swapped model's engine runs in development
  mode, whose endpoints (`/sleep`, `/wake_up`, `/collective_rpc`, …: engines/<engine>.py
  `sleep_mode.dev_endpoints`) are not under `/v1`, so the API key guards none of them: its
  Service has no load balancer and its NetworkPolicy admits the run's pod alone (the swap
  driver's, kube/models.py), so the run must be a pod in the cluster (deploy/values.yaml
  labels the run pods); on a profile that opens engines to the internet such a candidate is
  refused (`refused`).
events.parquet: the deploy's events are written as they happen, then handed to the
driver's process, which owns the file for the rest of the run.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.contract.timestamps import format_ts
from servingbench.resources.http import control
from servingbench.resources.model_server import engines
from servingbench.resources.model_server.fleet.events import Events
from servingbench.resources.model_server.interface import Deployment
from servingbench.resources.model_server.kube.client import RolloutError
from servingbench.resources.model_server.kube.deploy import delete_in_reverse
from servingbench.resources.model_server.kube.models import render_models
from servingbench.resources.model_server.kube.render import PORT, EngineSpec, api_key_secret
from servingbench.resources.model_server.swap.driver import Bounds
from servingbench.resources.model_server.swap.process import SwapProcess

log = logging.getLogger("servingbench.kube")
CONTROL_MAX_BYTES = 64 << 10  # /health and /sleep answer a few bytes
HEALTH_TRY_S = 15.0  # one /health read, as the single engine's readiness reads (server.py)
SLEEP_DEADLINE_S = Bounds().sleep_s  # the swap driver's own bound for the same call


def refused(candidate: Candidate, expose: dict | None = None) -> str | None:
    """Why a `models` candidate cannot run on eks (None: it can): the engines run one pod
    each on one node, on-demand (the plan takes no replicas with `models`); a swapped model
    needs an engine with a sleep mode, and none runs where the profile opens its engines to
    the internet (`expose`: the KubeModelServer's settings), even with consent: its sleep
    mode's development endpoints take no API key."""
    if candidate.capacity == "spot":
        return "models: several models on one node run on on-demand capacity only on eks"
    swapped = [i for i, m in enumerate(candidate.deployment.models) if m.placement == "swapped"]
    if not swapped:
        return None
    mode = engines.get(candidate.engine).sleep_mode
    if mode is None:
        return (f"models[{swapped[0]}].placement: swapped models sleep through their engine's "
                f"sleep mode, which {candidate.engine} does not have")
    for i in swapped:
        level = candidate.deployment.models[i].sleep_level or 1
        if level not in mode.levels:
            return (f"models[{i}].sleep_level: {level} is not one of {candidate.engine}'s "
                    f"{', '.join(map(str, mode.levels))}")
    if expose and public(expose):
        return (f"models[{swapped[0]}].placement: a swapped model runs {candidate.engine}'s "
                f"development mode ({', '.join(mode.dev_endpoints)}: no API key guards them); "
                "refused on a profile that opens its engines to the internet "
                "(SERVINGBENCH_EKS_ALLOW_PUBLIC, an internet-facing load balancer or a public "
                "source range), consent or not")
    return None


def public(expose: dict) -> bool:
    """Whether the profile's exposure settings open an engine beyond private address space."""
    if expose.get("lb_scheme") == "internet-facing" or expose.get("allow_public"):
        return True
    return any(not ipaddress.ip_network(c).is_private for c in expose.get("source_ranges", ()))


@contextlib.contextmanager
def deploy_models(server, candidate: Candidate, spec: EngineSpec, run_dir: Path,
                  key_env: str) -> Iterator[Deployment]:
    """`server` is the KubeModelServer (its kube client, expose settings, timeouts, clock
    and `service_address`), `spec` the candidate's engine (kube/server.py
    `engine_spec_for`), `key_env` the variable the load generator reads the key from."""
    why = refused(candidate, server.expose)
    if why is not None:
        raise ValueError(f"candidate {candidate.name}: {why}")
    run_dir = Path(run_dir)
    run_id = run_dir.name
    engine = engines.get(candidate.engine)
    models = [m.as_dict() for m in candidate.deployment.models]
    for i, m in enumerate(models):
        if m["precision"] not in engine.quantization:
            raise ValueError(f"candidate {candidate.name}: models[{i}].precision "
                             f"{m['precision']!r} needs a pre-quantized checkpoint as its "
                             "`model`; not supported on eks yet")
    try:
        objects = render_models(spec, models, engine.quantization, server.driver_namespace)
    except ValueError as exc:
        raise ValueError(f"candidate {candidate.name}: {exc}") from None
    per_model = [objects[3 * i:3 * i + 3] for i in range(len(models))]  # Deployment, Service, Policy
    api_key = secrets.token_urlsafe(32)
    secret = api_key_secret(spec, api_key)
    run_dir.mkdir(parents=True, exist_ok=True)
    events = Events(run_dir, run_id)
    kube = server.kube()
    applied: list[dict] = []
    driver = None
    os.environ[key_env] = api_key
    swapped = [m["name"] for m in models if m["placement"] == "swapped"]
    try:
        started = server.clock()
        kube.apply(secret)
        applied.append(secret)
        upstreams: dict[str, tuple[str, int]] = {}
        names: dict[str, str] = {}
        with httpx.Client(timeout=10, trust_env=False) as http:  # bounded per call below
            for m, (deployment, service, policy) in zip(models, per_model, strict=True):
                name = deployment["metadata"]["name"]
                names[m["name"]] = name
                t0 = server.clock()
                for obj in (policy, deployment, service):
                    kube.apply(obj)
                    applied.append(obj)
                kube.wait_ready(name, timeout_s=server.timeout_s, poll_s=server.poll_s)
                upstreams[m["name"]] = _address(server, kube, name, spec.namespace,
                                                m["placement"] == "swapped")
                host, port = upstreams[m["name"]]
                # an NLB answers minutes after the pod is ready (DNS, target registration)
                _wait(http, server, f"http://{host}:{port}/health")
                t1 = server.clock()
                events.add("model_load", m["name"], at_ns=t1, value=(t1 - t0) / 1e9,
                           detail=f"Deployment {name} applied → ready")
                log.info("model %s ready (%s) in %.1f s", m["name"], name, (t1 - t0) / 1e9)
                if m["placement"] == "swapped" and m["name"] != swapped[-1]:
                    _sleep(http, server, events, m, upstreams[m["name"]], candidate.engine)
        ended = server.clock()
        driver = SwapProcess(models, None, run_dir, run_id, upstreams=upstreams,
                             prior_events=list(events.rows))
        endpoint = f"http://127.0.0.1:{driver.start()}"
        first = upstreams[models[0]["name"]]
        yield Deployment(
            endpoint=endpoint, served_model=models[0]["name"],
            facts={"engine": candidate.engine,
                   "engine_version": server._version(f"http://{first[0]}:{first[1]}",
                                                     {"Authorization": f"Bearer {api_key}"}),
                   "image_digest": candidate.image_digest},
            phases={"deploy": {"started_at": format_ts(started), "ended_at": format_ts(ended)}},
            emulated=False,
            details={"deployments": names, "swap_driver": endpoint,
                     "upstreams": {n: f"{h}:{p}" for n, (h, p) in upstreams.items()}},
            api_key_env=key_env,
            telemetry=list(server.telemetry))
    finally:
        try:
            if driver is not None:
                driver.stop()
        finally:
            os.environ.pop(key_env, None)
            try:
                _delete(kube, applied)
            finally:
                kube.close()


def _address(server, kube, name: str, namespace: str,
             in_cluster: bool = False) -> tuple[str, int]:
    """Where this process reaches one model's Service: `server.service_address(name)` when
    set (a test's stand-in), else its NLB's name or its in-cluster DNS name (a swapped
    model's always: it has no load balancer), port 8000."""
    if server.service_address is not None:
        return server.service_address(name)
    if server.expose["expose"] == "load_balancer" and not in_cluster:
        host = kube.wait_load_balancer(name, timeout_s=server.timeout_s, poll_s=server.poll_s)
        return host, PORT
    return f"{name}.{namespace}.svc.cluster.local", PORT


def _sleep(http: httpx.Client, server, events: Events, m: dict,
           address: tuple[str, int], engine: str = engines.SLEEP_DIALECT) -> None:
    """Put a swapped model to sleep before the next engine starts, timed → model_sleep;
    through the bounded control client (one deadline over connect, head and body: a server
    trickling `100 Continue` is given up at it, where httpx's per-read timeout never fires)."""
    level = m.get("sleep_level") or 1
    url = f"http://{address[0]}:{address[1]}"
    calls = engines.sleep_mode(engine)
    t0 = server.clock()
    try:
        r, body = control.request(http, "POST", f"{url}{calls.sleep}", params={"level": level},
                                  max_bytes=CONTROL_MAX_BYTES, deadline_s=SLEEP_DEADLINE_S)
    except (httpx.HTTPError, control.ControlError) as exc:
        raise RolloutError(f"model {m['name']}: POST {calls.sleep}?level={level}: {exc}") from None
    t1 = server.clock()
    if r.status_code != 200:
        raise RolloutError(f"model {m['name']}: POST {calls.sleep}?level={level}: HTTP "
                           f"{r.status_code} {body[:200].decode('utf-8', 'replace')}")
    events.add("model_sleep", m["name"], at_ns=t1, value=(t1 - t0) / 1e9,
               detail=f"level {level} (before the next engine starts)")


def _wait(http: httpx.Client, server, url: str, clock: Callable[[], float] = time.monotonic) -> None:
    """Until `url` answers 200, for at most the server's rollout timeout: each try through the
    bounded control client, its deadline within what is left, so the whole wait ends by it."""
    deadline = clock() + server.timeout_s
    while True:
        left = deadline - clock()
        try:
            r, _ = control.request(http, "GET", url, max_bytes=CONTROL_MAX_BYTES,
                                   deadline_s=max(0.1, min(HEALTH_TRY_S, left)))
            if r.status_code == 200:
                return
        except (httpx.HTTPError, control.ControlError):
            pass
        if clock() >= deadline:
            raise RolloutError(f"{url} not reachable within {server.timeout_s:.0f}s")
        time.sleep(max(0.0, min(server.poll_s, deadline - clock())))


def _delete(kube, applied: list[dict]) -> None:
    """Every applied object, in the reverse order (deploy.py's teardown, named `models`)."""
    delete_in_reverse(kube, applied, "models")
