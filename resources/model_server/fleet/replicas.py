"""Several emulator replicas behind one HAProxy (balancer.py): the embedded default's
`replicas {min, max, initial}` (contract §2.1).

A replica is one emulator process started with `--replica-phases`: it goes through a new
replica's start-up (image pull, weights load, compile on Neuron, graph capture; the
emulator's spec times, the weights scaled by the model's size, all × the time scale) and
only when its /health answers 200 does it join the pool. Starting, each phase, joining and
stopping are events (contract §2.6): `replica_requested` (detail: the node), one
`replica_phase` per phase at its end (value: its seconds), `replica_phase` `ready` (the
health poll until the pool took it), `replica_ready` (detail: the node), `replica_stopped`.

Stopping drains first: no new request, those in flight finish (bounded), then the server
leaves HAProxy and the process is stopped.

A spot run (`nodes="own"`) puts each replica on its own emulated node `node-<replica>`:
`node_requested` and `node_ready` when it is asked for (the host is already up: no
provisioning time is emulated), `node_gone` when it stops. `interrupt` is a spot
interruption of a replica's node: `interruption_notice`, the replica drained from HAProxy
(no new request; those in flight keep streaming) and its replacement started at once, then
after the notice its process is killed mid-stream and the node is gone (`interruption`,
`replica_stopped`). EMULATED, as everything on the embedded default, unless the replica
set is given another engine's processes (`spawn`): llama.cpp's replicas (llamacpp.py) are
real servers on this host, their phases split by the engine launcher's own markers, so an
episode of them is MEASURED."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from servingbench.resources.contract.timestamps import parse_ts
from servingbench.resources.model_server.fleet.balancer import Balancer
from servingbench.resources.model_server.fleet.events import Events

NODE = "localhost"  # every local replica runs on this host


class Replica:
    def __init__(self, name: str) -> None:
        self.name = name
        self.node: str | None = None
        self.proc = None  # the EmulatorProcess once started
        self.state = "starting"  # starting | ready | draining | stopped | failed
        self.error: str | None = None
        self.thread: threading.Thread | None = None
        # its last /metrics, read after its drain and before its process stopped (kept by a
        # set that `keeps_metrics`, for the pool's summed counters, summed_metrics.py)
        self.final_metrics: str | None = None
        self.stop_recorded = False  # its replica_stopped is written (once, whoever stops it)

    @property
    def port(self) -> int | None:
        return None if self.proc is None else self.proc.port

    @property
    def metrics_url(self) -> str | None:
        return None if self.proc is None else f"{self.proc.base_url}/metrics"


def start_phases(proc) -> dict[str, dict]:
    """A replica process's start-up phases `{phase: {started_at, ended_at}}`: a real engine's
    from its own markers (`start_phases()`), the emulator's from its /status."""
    if hasattr(proc, "start_phases"):
        return proc.start_phases()
    return proc.status().get("phases", {})


class ReplicaSet:
    """`args(name)` gives replica `name`'s emulator arguments (without --replica-phases);
    `spawn(name)`, when given, makes replica `name`'s process instead (another engine's: an
    object with start(), stop(), port, base_url, proc and start_phases())."""

    def __init__(self, args: Callable[[str], list[str]], balancer: Balancer, events: Events,
                 ready_timeout_s: float = 600.0, drain_timeout_s: float = 60.0,
                 node: str = NODE, spawn: Callable[[str], object] | None = None,
                 keeps_metrics: bool = False) -> None:
        self.args, self.lb, self.events, self.spawn = args, balancer, events, spawn
        self.keeps_metrics = keeps_metrics
        self.ready_timeout_s, self.drain_timeout_s, self.node = ready_timeout_s, drain_timeout_s, node
        # "own": each replica on its own emulated node (spot runs, and replicas that cannot share
        # an instance); else all on `node`
        self.own_nodes = node == "own"
        self.replicas: dict[str, Replica] = {}
        self._next = 0
        self._lock = threading.Lock()
        self._stopping: list[threading.Thread] = []

    # --- what is there ------------------------------------------------------------------
    def named(self, state: str) -> list[Replica]:
        with self._lock:
            return [r for r in self.replicas.values() if r.state == state]

    @property
    def ready(self) -> list[Replica]:
        return self.named("ready")

    @property
    def starting(self) -> list[Replica]:
        return self.named("starting")

    def count(self) -> int:
        """Replicas ready or on their way (what a scale decision counts as current)."""
        return len(self.ready) + len(self.starting)

    # --- up ---------------------------------------------------------------------------
    def start(self, wait: bool = False) -> Replica:
        """Start one replica on its own thread; `wait`: return once it is in the pool (or
        raise why it is not)."""
        with self._lock:
            rep = Replica(f"r{self._next}")
            self._next += 1
            self.replicas[rep.name] = rep
        self._launch(rep, wait)
        return rep

    def node_of(self, rep: Replica) -> str:
        return rep.node or self.node

    def _launch(self, rep: Replica, wait: bool) -> None:
        if self.own_nodes:
            rep.node = f"node-{rep.name}"
            self.events.add("node_requested", rep.node)
            self.events.add("node_ready", rep.node)
        self.events.add("replica_requested", rep.name, detail=self.node_of(rep))
        rep.thread = threading.Thread(target=self._bring_up, args=(rep,),
                                      name=f"replica-{rep.name}", daemon=True)
        rep.thread.start()
        if wait:
            rep.thread.join()
            if rep.state != "ready":
                raise RuntimeError(f"replica {rep.name} did not start: {rep.error}")

    def _bring_up(self, rep: Replica) -> None:
        if self.spawn is not None:
            proc = self.spawn(rep.name)
        else:
            from servingbench.emulator.process import EmulatorProcess

            proc = EmulatorProcess([*self.args(rep.name), "--replica-phases"],
                                   ready_timeout_s=self.ready_timeout_s)
        rep.proc = proc
        try:
            proc.start()
            healthy = time.time_ns()
            last_end = None
            for phase, span in start_phases(proc).items():
                if span.get("started_at") and span.get("ended_at"):
                    began, ended = parse_ts(span["started_at"]), parse_ts(span["ended_at"])
                    self.events.add("replica_phase", rep.name, ended, (ended - began) / 1e9, phase)
                    last_end = ended
            if rep.state != "starting":  # stopped while it started
                proc.stop()
                return
            self.lb.add(rep.name, proc.port)
            joined = time.time_ns()
            since = last_end if last_end is not None else healthy
            self.events.add("replica_phase", rep.name, joined, (joined - since) / 1e9, "ready")
            with self._lock:
                rep.state = "ready"
            self.events.add("replica_ready", rep.name, joined, detail=self.node_of(rep))
        except Exception as exc:  # noqa: BLE001 - said in the replica's state and the stop event
            rep.error = f"{type(exc).__name__}: {exc}"[:500]
            proc.stop()
            with self._lock:
                failed = rep.state == "starting"  # not stopped on purpose (stop() says that)
                if failed:
                    rep.state = "failed"
            if failed:
                self.events.add("replica_stopped", rep.name,
                                detail=f"failed to start: {rep.error}"[:200])
                self._node_gone(rep)

    # --- down -------------------------------------------------------------------------
    def stop(self, name: str) -> None:
        """Drain `name` (no new request, those in flight finish within the drain bound),
        take it out of HAProxy, stop its process."""
        self._finish_stop(name, self._begin_stop(name))

    def stop_later(self, name: str) -> threading.Thread:
        """`stop` on its own thread; `name` stops counting at once (a scale decision that
        follows sees it gone)."""
        was = self._begin_stop(name)
        t = threading.Thread(target=self._finish_stop, args=(name, was),
                             name=f"replica-{name}-stop", daemon=True)
        t.start()
        self._stopping.append(t)
        return t

    def _begin_stop(self, name: str) -> str:
        rep = self.replicas[name]
        with self._lock:
            was, rep.state = rep.state, "draining"
        return was

    def _finish_stop(self, name: str, was: str) -> None:
        rep = self.replicas[name]
        try:
            if was == "ready":
                try:
                    self._drain_out(rep)
                except Exception as exc:  # noqa: BLE001 - HAProxy gone (the run's end) or refusing
                    # the drain cannot be watched any more: the replica stops all the same,
                    # and says so below
                    rep.error = f"drain: {type(exc).__name__}: {exc}"[:500]
            elif was == "starting":
                if rep.proc is not None:
                    rep.proc.stop()  # its start-up ends now; the thread sees it was stopped
                if rep.thread is not None:
                    rep.thread.join()
        finally:  # whatever the balancer did: the process stops and the stop is recorded once
            if rep.proc is not None:
                rep.proc.stop()
            with self._lock:
                rep.state = "stopped"
                # "draining": a drain whose own thread did not finish (close)
                record = was in ("ready", "starting", "draining") and not rep.stop_recorded
                rep.stop_recorded = rep.stop_recorded or record
            if record:
                self.events.add("replica_stopped", name, detail=self.node_of(rep))
                self._node_gone(rep)

    def _drain_out(self, rep: Replica) -> None:
        """Out of HAProxy: no new request, those in flight finish within the drain bound,
        then removed (and its last /metrics kept where the set keeps them)."""
        self.lb.drain(rep.name)
        deadline = time.monotonic() + self.drain_timeout_s
        while self.lb.active(rep.name) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.lb.remove(rep.name)
        if self.keeps_metrics and rep.metrics_url is not None:
            from servingbench.resources.model_server.fleet.summed_metrics import scrape

            rep.final_metrics = scrape(rep.metrics_url)

    def _node_gone(self, rep: Replica) -> None:
        if self.own_nodes and rep.node is not None:
            self.events.add("node_gone", rep.node)

    # --- a spot interruption ----------------------------------------------------------
    def oldest_ready(self) -> str | None:
        """The replica an interruption hits: the first to have joined of those serving."""
        ready = self.ready
        return ready[0].name if ready else None

    def interrupt(self, name: str, notice_s: float) -> threading.Thread:
        """A spot interruption of `name`'s node: the notice now (drained, a replacement
        asked for), the node gone `notice_s` later (the process killed, whatever it still
        streams). Returns the thread that ends it."""
        rep = self.replicas[name]
        with self._lock:
            if rep.state != "ready":
                raise ValueError(f"replica {name} is {rep.state}, not serving")
            # not counted from now on (count()), so the autoscaler does not replace it twice
            rep.state = "noticed"
            replacement = Replica(f"r{self._next}")
            self._next += 1
            self.replicas[replacement.name] = replacement
        # drained first, then the notice recorded: on the embedded default the two are one
        # act, and its time is when HAProxy stopped sending the replica new requests (a
        # request the client sent after the notice's time never reaches the noticed replica;
        # recorded before the drain, a busy machine let one in a few ms after it)
        self.lb.drain(name)
        self.events.add("interruption_notice", self.node_of(rep),
                        detail=f"replica {name}; notice {notice_s:g} s")
        self._launch(replacement, wait=False)
        t = threading.Thread(target=self._reclaim, args=(rep, notice_s),
                             name=f"replica-{name}-interrupted", daemon=True)
        rep.thread = t
        t.start()
        return t

    def _reclaim(self, rep: Replica, notice_s: float) -> None:
        time.sleep(notice_s)
        with self._lock:
            if rep.state != "noticed":  # the run ended first (close)
                return
            rep.state = "stopped"
        if rep.proc is not None and rep.proc.proc is not None and rep.proc.proc.poll() is None:
            rep.proc.proc.kill()  # the node is gone: no drain, no clean shutdown
            rep.proc.proc.wait()
        self.events.add("interruption", self.node_of(rep), detail=f"replica {rep.name}")
        self.events.add("replica_stopped", rep.name, detail=self.node_of(rep))
        try:
            self.lb.remove(rep.name, timeout_s=10)
        finally:
            rep.proc.stop()

    def newest_ready(self) -> str | None:
        """The replica a scale-down stops first (the last to have joined)."""
        ready = self.ready
        return ready[-1].name if ready else None

    def close(self) -> None:
        """Stop every replica (the run's end, or a failure)."""
        # a drain begun by the autoscaler finishes first: its thread writes the replica's
        # `replica_stopped`, and a run that ended before it would lose that event
        for t in list(self._stopping):
            t.join(self.drain_timeout_s + 10.0)
        for rep in list(self.replicas.values()):
            if rep.state == "noticed":  # its notice outlasts the run: it stops with it
                with self._lock:
                    rep.state = "ready"
            if rep.state in ("ready", "starting", "draining"):
                try:
                    if rep.state == "draining":  # its drain outlasted the wait above
                        self._finish_stop(rep.name, "draining")
                    else:
                        self.stop(rep.name)
                except Exception:  # noqa: BLE001 - the others are still stopped
                    if rep.proc is not None:
                        rep.proc.stop()
