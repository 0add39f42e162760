"""A candidate with `replicas` (and perhaps `autoscaling`) on the embedded default: its
emulator replicas behind HAProxy on loopback, the `local` autoscaler over them, every event
in the run folder's events.parquet (contract §2.1, §2.6). The chain uses it like any
deployment: the endpoint is the balancer's; everything is stopped when the block ends."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from servingbench.resources.contract.deployment import Replicated
from servingbench.resources.contract.timestamps import format_ts, parse_ts
from servingbench.resources.model_server.fleet.autoscale_loop import Autoscaler
from servingbench.resources.model_server.fleet.autoscale_rule import Policy
from servingbench.resources.model_server.fleet.balancer import Balancer
from servingbench.resources.model_server.fleet.events import Events
from servingbench.resources.model_server.fleet.replicas import ReplicaSet, start_phases
from servingbench.resources.model_server.fleet.summed_metrics import SummedMetrics

log = logging.getLogger("servingbench.replicas")

LOCAL_INTERVAL_S = 1.0  # the controller's period: KEDA's pollingInterval, time-compressed


def steady_start_ns(run_dir: Path) -> int | None:
    """When the run's steady phase began, from the manifest the load generator writes at
    each phase boundary; None before."""
    try:
        doc = json.loads((Path(run_dir) / "manifest.json").read_text())
        return parse_ts(doc["phases"]["steady"]["started_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class Interrupter:
    """Spot interruptions on the embedded default: at each time of the candidate's schedule
    (seconds into the steady phase, which it learns from the manifest), the oldest serving
    replica's node gets its notice (ReplicaSet.interrupt) and is gone `notice_s` later."""

    def __init__(self, replicas: ReplicaSet, run_dir: Path, times: list[float],
                 notice_s: float, poll_s: float = 0.05) -> None:
        self.replicas, self.run_dir, self.times = replicas, Path(run_dir), list(times)
        self.notice_s, self.poll_s = notice_s, poll_s
        self.noticed: list[tuple[float, str]] = []  # (seconds into steady, replica)
        # times whose interruption had no target: the run says so (missed), never a spot
        # run that silently went uninterrupted
        self.missed: list[float] = []
        self.endings: list[threading.Thread] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="interrupter", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        origin = None
        while origin is None:
            if self._stop.wait(self.poll_s):
                return
            origin = steady_start_ns(self.run_dir)
        for t in self.times:
            if self._stop.wait(max(0.0, (origin + t * 1e9 - time.time_ns()) / 1e9)):
                return
            name = self.replicas.oldest_ready()
            if name is None:  # nothing serving to interrupt: the notice has no target
                self.missed.append(t)
                log.error("spot interruption at %g s into the steady phase: no replica was "
                          "serving to interrupt", t)
                continue
            self.endings.append(self.replicas.interrupt(name, self.notice_s))
            self.noticed.append((t, name))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@contextlib.contextmanager
def replicated(args: Callable[[str], list[str]], run_dir: Path, run_id: str, plan: Replicated,
               ready_timeout_s: float, notice_scale: float = 1.0, own_nodes: bool = False,
               spawn: Callable[[str], object] | None = None) -> Iterator[dict]:
    """Start the balancer and the initial replicas (all ready before this yields), then the
    local autoscaler; yields {endpoint, phases, replicas, metrics_urls}. `args(name)`: a
    replica's emulator arguments. `own_nodes`: each replica on its own emulated node (a run
    that says its capacity); the plan's interruptions (a spot run's schedule) each give a
    notice of `notice_s × notice_scale` (the emulator's time scale); `spawn(name)`: replica
    `name`'s process when it is not the emulator's (llama.cpp's, replicas.py). A plan this
    host cannot run is refused before (the servers' `refuses`)."""
    replicas, autoscaling, interruptions = plan.replicas, plan.autoscaling, plan.interruptions
    events = Events(run_dir, run_id)
    started = time.time_ns()
    # a real engine's pool answers /metrics with every replica's counters summed (the load
    # generator reconciles against them); the emulator's keeps its one replica's answer
    with contextlib.ExitStack() as stack:
        summed = None if spawn is None else stack.enter_context(SummedMetrics())
        lb = stack.enter_context(Balancer(
            metrics_port=None if summed is None else summed.port))
        reps = ReplicaSet(args, lb, events, ready_timeout_s=ready_timeout_s, spawn=spawn,
                          keeps_metrics=summed is not None,
                          **({"node": "own"} if own_nodes or interruptions is not None else {}))
        if summed is not None:
            summed.replicas, summed.balancer = reps, lb
        scaler = interrupter = None
        try:
            first = [reps.start() for _ in range(replicas.initial)]
            for rep in first:
                rep.thread.join()
                if rep.state != "ready":
                    raise RuntimeError(f"replica {rep.name} did not start: {rep.error}")
            phases = {"deploy": {"started_at": format_ts(started),
                                 "ended_at": format_ts(time.time_ns())}}
            if first:
                status = start_phases(first[0].proc)
                # the manifest's deploy sub-phases: the first replica's (graph capture is the
                # engine's `ready` phase, as in a single deployment)
                for name, key in (("image_pull", "image_pull"), ("weights_load", "weights_load"),
                                  ("compile", "compile"), ("graph_capture", "ready")):
                    if status.get(name):
                        phases[key] = status[name]
            if autoscaling is not None:
                scaler = Autoscaler(Policy.of(autoscaling, replicas), reps, lb, events,
                                    initial=replicas.initial, interval_s=LOCAL_INTERVAL_S)
                scaler.start()
            if interruptions is not None:
                interrupter = Interrupter(reps, run_dir, interruptions.times(),
                                          interruptions.notice_s * notice_scale)
                interrupter.start()
            yield {"endpoint": lb.base_url, "phases": phases, "replica_set": reps,
                   "metrics_urls": [r.metrics_url for r in first]}
        finally:
            if interrupter is not None:
                interrupter.stop()
            if scaler is not None:
                scaler.stop()
            reps.close()
        if interrupter is not None and interrupter.missed:
            # as on EKS (kube/spot.py): a spot run whose interruptions did not happen is not
            # one; the records are kept, the run fails saying why
            raise RuntimeError(
                "spot interruptions did not all happen: no replica was serving to interrupt "
                f"at {', '.join(f'{t:g}' for t in interrupter.missed)} s into the steady phase")
