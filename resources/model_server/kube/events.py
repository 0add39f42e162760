"""Node and replica events of a run on EKS, from the Kubernetes API (contract §2.6).

Nodes: the run's node group's Node objects, polled. A node first seen is `node_requested`
at its creationTimestamp (the kubelet registered it: EC2 launched it moments before) and
`node_ready` at its Ready condition's lastTransitionTime; a node cordoned while the run
lives (the managed node group drains a spot node on its interruption notice or rebalance
recommendation) is `interruption_notice`; a node that disappears is `node_gone` — or
`interruption` when a notice came first.

Replicas: each engine pod is `replica_requested` at its creationTimestamp, then one
`replica_phase` per start-up phase from the same conditions, events and engine log markers
the cold start reads (kube/coldstart.py), `replica_ready` at its Ready condition, and
`replica_stopped` when it goes. `replica_requested` and `replica_ready` carry the node.
Timestamps from the API are whole seconds; the log markers are nanoseconds.
"""

from __future__ import annotations

from collections.abc import Callable

from servingbench.resources.contract.timestamps import parse_ts
from servingbench.resources.model_server import engines
from servingbench.resources.model_server.fleet.events import Events
from servingbench.resources.model_server.kube.coldstart import cold_start_phases

Event = tuple[int, str, str, float | None, str | None]  # at ns, kind, subject, value, detail
NODEGROUP_NODE_LABEL = "eks.amazonaws.com/nodegroup"
CORDON_TAINTS = {"node.kubernetes.io/unschedulable", "karpenter.sh/disrupted"}
# cold_start_phases' names -> the contract's replica phases (`scheduling` is not one)
PHASES = (("image_pull", "image_pull"), ("weights_load", "weights_load"),
          ("compile", "compile"), ("ready", "ready"))


def _ts(text: str | None) -> int | None:
    try:
        return parse_ts(text) if text else None
    except ValueError:
        return None


def _ready_at(obj: dict) -> int | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready" and c.get("status") == "True":
            return _ts(c.get("lastTransitionTime"))
    return None


def _cordoned(node: dict) -> bool:
    spec = node.get("spec") or {}
    return bool(spec.get("unschedulable")) or any(
        t.get("key") in CORDON_TAINTS for t in spec.get("taints") or [])


class NodeWatch:
    """Turns successive lists of the run's Node objects into node events."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.ready: set[str] = set()
        self.noticed: set[str] = set()
        self.gone: set[str] = set()
        self.last: dict[str, dict] = {}  # the latest list, by name

    def notice(self, instance_id: str, at_ns: int) -> list[Event]:
        """A spot interruption notice EC2/FIS reported for `instance_id`, at its own time:
        an `interruption_notice` for the instance's Node (matched by providerID), unless its
        cordon was already seen; nothing for an instance that is no Node of the run."""
        name = next((n for n, node in self.last.items()
                     if (node.get("spec") or {}).get("providerID", "").rsplit("/", 1)[-1]
                     == instance_id), None)
        if name is None or name in self.noticed:
            return []
        self.noticed.add(name)
        return [(at_ns, "interruption_notice", name, None, f"instance {instance_id}")]

    def observe(self, nodes: list[dict], now_ns: int) -> list[Event]:
        out: list[Event] = []
        names = set()
        for node in nodes:
            meta = node.get("metadata") or {}
            name = meta.get("name", "?")
            names.add(name)
            if name not in self.seen:
                self.seen.add(name)
                out.append((_ts(meta.get("creationTimestamp")) or now_ns,
                            "node_requested", name, None, None))
            ready = _ready_at(node)
            if ready is not None and name not in self.ready:
                self.ready.add(name)
                out.append((ready, "node_ready", name, None, None))
            if _cordoned(node) and name not in self.noticed:
                self.noticed.add(name)
                added = [_ts(t.get("timeAdded")) for t in (node.get("spec") or {}).get("taints") or []
                         if t.get("key") in CORDON_TAINTS]
                at = next((a for a in added if a is not None), now_ns)
                out.append((at, "interruption_notice", name, None, None))
        self.last = {n["metadata"]["name"]: n for n in nodes if n.get("metadata")}
        for name in sorted(self.seen - names - self.gone):
            self.gone.add(name)
            out.append((now_ns, "interruption" if name in self.noticed else "node_gone",
                        name, None, None))
        return out


def replica_events(pod: dict, events: list[dict], log_lines: list[str],
                   engine: str) -> list[Event]:
    """One pod's start: requested, each known phase (value: its seconds), ready."""
    meta = pod.get("metadata") or {}
    name = meta.get("name", "?")
    node = (pod.get("spec") or {}).get("nodeName")
    out: list[Event] = []
    created = _ts(meta.get("creationTimestamp"))
    if created is not None:
        out.append((created, "replica_requested", name, None, node))
    spans = cold_start_phases(pod, events, log_lines, engine)
    for ours, phase in PHASES:
        span = spans.get(ours)
        if span is not None:
            out.append((span[1], "replica_phase", name, (span[1] - span[0]) / 1e9, phase))
    ready = _ready_at(pod)
    if ready is not None:
        out.append((ready, "replica_ready", name, None, node))
    return out


def compile_cache(log_lines: list[str], engine: str) -> str | None:
    """`hit` when every graph the engine needed came from the compiled-model cache, `miss`
    when it compiled any, None when its log says neither (an engine without the markers)."""
    markers = engines.get(engine).markers
    hits, misses = markers.get("compile_cache_hit"), markers.get("compile_cache_miss")
    if not hits or not misses:
        return None
    text = [line.partition(" ")[2] for line in log_lines]
    if any(m in t for t in text for m in misses):
        return "miss"
    if any(m in t for t in text for m in hits):
        return "hit"
    return None


class ReplicaWatch:
    """Turns successive lists of the engine's pods into replica events; a pod's start-up
    is read once it is Ready (its log then holds every marker)."""

    def __init__(self, engine: str, read: Callable[[dict], tuple[list[dict], list[str]]]):
        self.engine, self.read = engine, read  # read(pod) -> (its events, its log lines)
        self.started: set[str] = set()
        self.stopped: set[str] = set()
        self.cache: dict[str, str | None] = {}  # pod -> compile cache hit | miss | None

    def observe(self, pods: list[dict], now_ns: int) -> list[Event]:
        out: list[Event] = []
        names = set()
        for pod in pods:
            name = (pod.get("metadata") or {}).get("name", "?")
            names.add(name)
            if name in self.started or _ready_at(pod) is None:
                continue
            self.started.add(name)
            events, lines = self.read(pod)
            out += replica_events(pod, events, lines, self.engine)
            self.cache[name] = compile_cache(lines, self.engine)
        for name in sorted(self.started - names - self.stopped):
            self.stopped.add(name)
            out.append((now_ns, "replica_stopped", name, None, None))
        return out


class RunEvents:
    """Polls the API for one run's nodes (its node group) and engine pods; `events` keeps
    everything seen so far, and `sink` writes each to events.parquet. Call `poll` on the run's cadence (each poll is two lists, and a
    pod's events and log once, when it becomes Ready) and once more at the end."""

    def __init__(self, kube, spec, nodegroup: str, clock: Callable[[], int],
                 sink: Events | None = None):
        self.kube, self.spec, self.nodegroup, self.clock = kube, spec, nodegroup, clock
        self.nodes = NodeWatch()
        self.replicas = ReplicaWatch(spec.runtime.name, self._read)
        self.events: list[Event] = []
        self.sink = sink  # the run's events.parquet (model_server/fleet/events.py), if it has one

    def _read(self, pod: dict) -> tuple[list[dict], list[str]]:
        name = pod["metadata"]["name"]
        return (self.kube.list("Event", field_selector=f"involvedObject.name={name}"),
                self.kube.pod_log(name, "engine"))

    def notice(self, instance_id: str, at_ns: int) -> list[Event]:
        """Record a notice from EC2/FIS (resources/cluster/fis.py `notices`)."""
        new = self.nodes.notice(instance_id, at_ns)
        self._keep(new)
        return new

    def _keep(self, new: list[Event]) -> None:
        self.events += new
        if self.sink is not None:
            for at, kind, subject, value, detail in new:
                self.sink.add(kind, subject, at, value, detail)

    def poll(self) -> list[Event]:
        now = self.clock()
        nodes = self.kube.list("Node", label_selector=f"{NODEGROUP_NODE_LABEL}={self.nodegroup}")
        pods = self.kube.list("Pod", label_selector=f"app.kubernetes.io/instance={self.spec.name}")
        new = self.nodes.observe(nodes, now) + self.replicas.observe(pods, now)
        self._keep(new)
        return new
