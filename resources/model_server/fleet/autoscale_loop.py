"""The `local` autoscaler's controller loop: every `interval_s` it reads the metric over the
ready replicas (their own /metrics gauges, as KEDA's Prometheus query reads vLLM's; `rps`
from the balancer's frontend), asks the rule (autoscale_rule.py) for the desired count, writes
a `scale_decision` event when that count changes (contract §2.6: value the desired
replicas, detail the reading), and starts or drains replicas to reach it. The rule is
KEDA/HPA's, run here; the replicas it scales are emulator processes (EMULATED) or real
llama.cpp servers on this host (MEASURED).

With no replica ready, no replica has gauges: the reading is then the requests arriving at
the balancer (its frontend's requests/s, which counts the ones it turns away with 503 while
no server is in the pool), as KEDA's scale-from-zero reads a metric from outside the pods."""

from __future__ import annotations

import threading
import time

import httpx
from servingbench.resources.http import control
from servingbench.resources.http.prometheus import parse
from servingbench.resources.model_server import engines
from servingbench.resources.model_server.fleet.autoscale_rule import Policy, State, decide
from servingbench.resources.model_server.fleet.balancer import Balancer
from servingbench.resources.model_server.fleet.events import Events
from servingbench.resources.model_server.fleet.replicas import ReplicaSet

SUBJECT = "local-autoscaler"
READ_DEADLINE_S = 2.0  # one replica's /metrics
READ_MAX_BYTES = 16 << 20  # as the load generator's own scrape of /metrics


class ReadFailed(Exception):
    """A ready replica's /metrics could not be read this round: its share of the metric is
    unknown, and reading it as 0 would scale the pool down for a hiccup."""
# the emulator serves vLLM's gauges, llama.cpp's launcher llama.cpp's; a replica serves one
# engine's, and the names are the engines package's knowledge
GAUGES = engines.gauges()


def gauge(text: str, metric: str) -> float:
    """The metric's value in one /metrics exposition (summed over label sets); 0 if absent."""
    samples = parse(text)
    for name in GAUGES[metric]:
        if name in samples:
            return sum(v for _, v in samples[name])
    return 0.0


class Autoscaler:
    def __init__(self, policy: Policy, replicas: ReplicaSet, balancer: Balancer, events: Events,
                 initial: int, interval_s: float = 1.0) -> None:
        self.policy, self.replicas, self.lb, self.events = policy, replicas, balancer, events
        self.interval_s = interval_s
        self.desired = initial  # the desired count before the first decision (§3.7)
        # KEDA counts the cooldown to zero from the workload's start, as from a last activity
        self.state = State(last_active=0.0)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()
        self.failed_reads = 0

    def reading(self) -> tuple[float, str]:
        """(the metric's total over the ready replicas, what it was read from)."""
        m = self.policy.metric
        ready = self.replicas.ready
        totals = self.lb.totals()
        if m == "rps" or not ready:
            return totals["rps"], f"rps={totals['rps']:g} at the balancer"
        total = 0.0
        # the replicas are ours on 127.0.0.1: never through a proxy the environment names
        with control.client(timeout=READ_DEADLINE_S, trust_env=False) as http:
            for rep in ready:
                try:
                    r, body = control.request(http, "GET", rep.metrics_url,
                                              max_bytes=READ_MAX_BYTES,
                                              deadline_s=READ_DEADLINE_S)
                    if r.status_code != 200:
                        raise ReadFailed(f"{rep.name}: /metrics answered {r.status_code}")
                except (httpx.HTTPError, control.ControlError) as exc:
                    raise ReadFailed(f"{rep.name}: {exc}") from None
                total += gauge(body.decode(errors="replace"), m)
        if m == "requests_waiting":
            total += totals["queued"]  # waiting at the balancer for a server
        return total, f"{m}={total:g} over {len(ready)} ready replicas"

    def tick(self, now: float | None = None) -> int:
        """One round of the loop: read, decide, act. Returns the desired count. A round whose
        reading failed decides nothing (the pool stays as it is, as KEDA keeps the replica
        count while its metric query fails), and is counted in `failed_reads`."""
        now = time.monotonic() - self._t0 if now is None else now
        try:
            total, read = self.reading()
        except ReadFailed:
            self.failed_reads += 1
            return self.desired
        current = self.replicas.count()
        desired = decide(now, current, total, self.policy, self.state)
        if desired != self.desired:
            self.events.add("scale_decision", SUBJECT, value=float(desired),
                            detail=f"{read}; {current} current, target {self.policy.target:g}")
            self.desired = desired
        self.act(desired)
        return desired

    def act(self, desired: int) -> None:
        """Start replicas up to `desired`, or drain the surplus (the ones still starting
        first, then the newest ready)."""
        current = self.replicas.count()
        for _ in range(desired - current):
            self.replicas.start()
        for _ in range(current - desired):
            starting = self.replicas.starting
            name = starting[-1].name if starting else self.replicas.newest_ready()
            if name is None:
                break
            self.replicas.stop_later(name)

    # --- the loop -----------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="local-autoscaler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - one failed round (a socket hiccup) is skipped
                continue

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
