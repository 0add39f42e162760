"""How a candidate is deployed (contract §2.1 `replicas`, `autoscaling`, `models`, `capacity`
and a spot run's `interruptions`): one typed, frozen plan, checked here once.

    Single          one engine server (the default)
    Replicated      several replicas behind one endpoint: `replicas`, perhaps `autoscaling`,
                    and a spot run's `interruptions`
    SeveralModels   several models on one node: `models` (each a ModelSlot), `model_bursts`

Each part has one `of(doc, where)`: the mapping as the candidates file (or a manifest)
writes it, every default filled in here and nowhere else, every number finite and bounded,
and a PlanError (a ValueError) naming the key on any mistake. The candidates file, the
manifest's checks, the Kubernetes manifests, the node group's size and the local replica
pool all read the plan; none checks it again. `plan_of` picks the kind from a candidate's
keys. Imports nothing of servingbench (it is the contract).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from servingbench.resources.contract.precisions import PRECISIONS

# The most nodes one run may hold: a candidate's `node_count`, and the nodes its replicas
# take at their most (node_count × replicas.max). A larger figure is a typo, and on eks a
# node group sized only by the account's quotas; locally, a fork storm of replica processes.
MAX_NODES = 64
POLICIES = ("keda", "hpa", "local")
METRICS = ("requests_waiting", "requests_running", "kv_cache_usage", "rps")
# The HPA's stabilization windows (autoscaling/v2 behavior) are at most one hour; the API
# server refuses more at apply, after the node group is up, so the plan refuses it first.
MAX_COOLDOWN_S = 3600.0
MAX_TARGET = 1e9            # a per-replica reading: requests, a fraction, requests/s
MAX_AT_SECONDS = 86_400.0   # interruption times: a day into the steady phase at most
MAX_AT_ENTRIES = 1_000
MAX_RATE_PER_HOUR = 3600.0  # one interruption a second, on average
MAX_SEED = 2**63 - 1
NOTICE_S = 120.0            # the notice EC2 gives a spot instance before it reclaims it
MAX_NOTICE_S = 900.0        # FIS allows two to fifteen minutes
CAPACITIES = ("on_demand", "spot")
PLACEMENTS = ("resident", "swapped")
SLEEP_LEVELS = (1, 2)       # vLLM's: 1 keeps the weights in host memory, 2 discards them
MAX_MODELS = 16
MAX_BURST = 1_000_000
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+/-]{0,255}")


class PlanError(ValueError):
    """A deployment key is malformed; the message starts with the key's full name."""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _mapping(doc: Any, where: str, keys) -> Mapping:
    if not isinstance(doc, Mapping):
        raise PlanError(f"{where}: expected a mapping with {', '.join(keys)}, got {_short(doc)}")
    for key in doc:
        if key not in keys:
            raise PlanError(f"{where}.{str(key)[:80]}: unknown key (expected {', '.join(keys)})")
    return doc


def _int(v: Any, where: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise PlanError(f"{where}: expected an integer in [{lo}, {hi:,}], got {_short(v)}")
    return v


def _number(v: Any, where: str, lo: float, hi: float, *, above: bool = False) -> float:
    """A finite number in [lo, hi] ((lo, hi] with `above`): YAML's .inf and .nan are not."""
    ok = (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
          and (v > lo if above else v >= lo) and v <= hi)
    if not ok:
        raise PlanError(f"{where}: expected a finite number in {'(' if above else '['}{lo:g}, "
                        f"{hi:g}], got {_short(v)}")
    return float(v)


def _one_of(v: Any, allowed: tuple, where: str) -> Any:
    if v not in allowed or isinstance(v, bool):
        raise PlanError(f"{where}: {_short(v)} is not one of {', '.join(map(str, allowed))}")
    return v


@dataclass(frozen=True)
class Replicas:
    """`replicas {min, max, initial}`: 0 <= min <= initial <= max, 1 <= max <= MAX_NODES."""

    min: int = 1
    max: int = 1
    initial: int = 1

    KEYS = ("min", "max", "initial")

    @classmethod
    def of(cls, doc: Any, where: str = "replicas") -> Replicas:
        doc = _mapping({} if doc is None else doc, where, cls.KEYS)
        lo = _int(doc.get("min", 1), f"{where}.min", 0, MAX_NODES)
        hi = _int(doc.get("max", max(lo, 1)), f"{where}.max", 1, MAX_NODES)
        initial = _int(doc.get("initial", max(lo, 1)), f"{where}.initial", 0, MAX_NODES)
        if not lo <= initial <= hi:
            raise PlanError(f"{where}: expected min <= initial <= max, got {lo}, {initial}, {hi}")
        return cls(lo, hi, initial)

    def as_dict(self) -> dict:
        return {"min": self.min, "max": self.max, "initial": self.initial}


@dataclass(frozen=True)
class Autoscaling:
    """`autoscaling {policy, metric, target, activation_target, scale_up_cooldown_s,
    scale_down_cooldown_s}`: the rule KEDA and the HPA apply (docs/episodes.md)."""

    policy: str                         # keda | hpa (eks) | local (this host); `of`: local
    metric: str
    target: float                       # per replica (the HPA's AverageValue)
    activation_target: float = 0.0      # KEDA's activationThreshold: 0 <-> 1
    scale_up_cooldown_s: float = 0.0    # the HPA's scaleUp stabilizationWindowSeconds
    scale_down_cooldown_s: float = 300.0  # its scaleDown window and KEDA's cooldownPeriod

    KEYS = ("policy", "metric", "target", "activation_target", "scale_up_cooldown_s",
            "scale_down_cooldown_s")

    @classmethod
    def of(cls, doc: Any, where: str = "autoscaling") -> Autoscaling:
        doc = _mapping(doc, where, cls.KEYS)
        for key in ("metric", "target"):
            if key not in doc:
                raise PlanError(f"{where}: missing key {key!r}")
        given = {k: v for k, v in doc.items() if v is not None}
        d = cls.__dataclass_fields__
        return cls(
            policy=_one_of(given.get("policy", "local"), POLICIES, f"{where}.policy"),
            metric=_one_of(doc["metric"], METRICS, f"{where}.metric"),
            target=_number(doc["target"], f"{where}.target", 0, MAX_TARGET, above=True),
            activation_target=_number(given.get("activation_target",
                                                d["activation_target"].default),
                                      f"{where}.activation_target", 0, MAX_TARGET),
            **{key: _number(given.get(key, d[key].default), f"{where}.{key}", 0, MAX_COOLDOWN_S)
               for key in ("scale_up_cooldown_s", "scale_down_cooldown_s")})

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.KEYS}


@dataclass(frozen=True)
class Interruptions:
    """A spot run's interruptions (contract §3.8), in seconds from the start of the steady
    phase: fixed times `at`, or a Poisson process of `rate_per_hour` drawn from `seed` (the
    same seed gives the same times); each node gets `notice_s` of notice."""

    at: tuple[float, ...] = ()
    rate_per_hour: float | None = None
    seed: int = 0
    notice_s: float = NOTICE_S

    KEYS = ("at", "rate_per_hour", "seed", "notice_s")

    @classmethod
    def of(cls, doc: Any, where: str = "interruptions") -> Interruptions:
        doc = _mapping(doc, where, cls.KEYS)
        if ("at" in doc) == ("rate_per_hour" in doc):
            raise PlanError(f"{where}: give either at (a list of seconds) or rate_per_hour "
                            "(with seed)")
        notice = _number(doc.get("notice_s", NOTICE_S), f"{where}.notice_s", 0, MAX_NOTICE_S,
                         above=True)
        if "at" in doc:
            at = doc["at"]
            if not isinstance(at, list | tuple) or not 0 < len(at) <= MAX_AT_ENTRIES:
                raise PlanError(f"{where}.at: expected a list of 1 to {MAX_AT_ENTRIES:,} seconds "
                                f"into the steady phase, got {_short(at)}")
            if "seed" in doc:
                raise PlanError(f"{where}.seed: goes with rate_per_hour, not at")
            times = sorted(_number(t, f"{where}.at", 0, MAX_AT_SECONDS) for t in at)
            return cls(at=tuple(times), notice_s=notice)
        return cls(rate_per_hour=_number(doc["rate_per_hour"], f"{where}.rate_per_hour", 0,
                                         MAX_RATE_PER_HOUR, above=True),
                   seed=_int(doc.get("seed", 0), f"{where}.seed", 0, MAX_SEED), notice_s=notice)

    def times(self, duration_s: float = MAX_AT_SECONDS) -> list[float]:
        """The interruption times inside a steady phase of `duration_s` seconds."""
        if self.rate_per_hour is None:
            return [t for t in self.at if t < duration_s]
        rng, out, t = random.Random(self.seed), [], 0.0
        while True:
            t += rng.expovariate(self.rate_per_hour / 3600.0)
            if t >= duration_s:
                return out
            out.append(round(t, 3))

    def as_dict(self) -> dict:
        if self.rate_per_hour is None:
            return {"at": list(self.at), "notice_s": self.notice_s}
        return {"rate_per_hour": self.rate_per_hour, "seed": self.seed, "notice_s": self.notice_s}


@dataclass(frozen=True)
class ModelSlot:
    """One of several models on a node (contract §2.1 `models`): `name` the served model
    name requests address; `placement` resident (loaded all run, `memory_share` of the
    node's accelerator memory) or swapped (one awake at a time; `sleep_level` 1 keeps the
    weights in host memory, 2 discards them); `request_share` the fraction of requests."""

    name: str
    model: str
    precision: str
    placement: str
    memory_share: float
    request_share: float
    model_revision: str | None = None
    sleep_level: int | None = None      # swapped only: 1 unless given

    KEYS = ("name", "model", "model_revision", "precision", "placement", "memory_share",
            "request_share", "sleep_level")
    REQUIRED = ("name", "model", "precision", "placement", "memory_share", "request_share")
    # what a manifest records of a slot (contract §2.1 lists no sleep_level)
    MANIFEST_KEYS = KEYS[:-1]

    @classmethod
    def of(cls, doc: Any, where: str) -> ModelSlot:
        doc = _mapping(doc, where, cls.KEYS)
        for key in cls.REQUIRED:
            if doc.get(key) is None:
                raise PlanError(f"{where}: missing key {key!r}")
        name = doc["name"]
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise PlanError(f"{where}.name: {_short(name)} is not a served model name (letters, "
                            "digits, '._-', at most 64)")
        for key in ("model", "model_revision"):
            v = doc.get(key)
            if v is not None and (not isinstance(v, str) or not _MODEL_ID.fullmatch(v)):
                raise PlanError(f"{where}.{key}: {_short(v)} is not a model id")
        placement = _one_of(doc["placement"], PLACEMENTS, f"{where}.placement")
        level = doc.get("sleep_level")
        if placement == "resident":
            if level is not None:
                raise PlanError(f"{where}.sleep_level: only a swapped model sleeps (placement "
                                "is resident)")
        else:
            level = _one_of(1 if level is None else level, SLEEP_LEVELS, f"{where}.sleep_level")
        return cls(name=name, model=doc["model"], model_revision=doc.get("model_revision"),
                   precision=_one_of(doc["precision"], PRECISIONS, f"{where}.precision"),
                   placement=placement,
                   memory_share=_number(doc["memory_share"], f"{where}.memory_share", 0, 1,
                                        above=True),
                   request_share=_number(doc["request_share"], f"{where}.request_share", 0, 1),
                   sleep_level=level)

    @classmethod
    def list_of(cls, docs: Any, where: str) -> tuple[ModelSlot, ...]:
        """Each entry a slot, every name once (what a manifest's `models` must be too)."""
        if not isinstance(docs, list | tuple) or len(docs) > MAX_MODELS:
            raise PlanError(f"{where}: expected a list of at most {MAX_MODELS} models, "
                            f"got {_short(docs)}")
        slots: list[ModelSlot] = []
        for i, entry in enumerate(docs):
            slot = cls.of(entry, f"{where}[{i}]")
            if any(s.name == slot.name for s in slots):
                raise PlanError(f"{where}[{i}].name: {slot.name!r} given twice")
            slots.append(slot)
        return tuple(slots)

    def as_dict(self) -> dict:
        return asdict(self)

    def as_manifest(self) -> dict:
        return {k: getattr(self, k) for k in self.MANIFEST_KEYS}


@dataclass(frozen=True)
class Single:
    """One engine server: the candidate's one model, one replica."""


@dataclass(frozen=True)
class Replicated:
    """Several replicas behind one endpoint; `autoscaling` None: their number is fixed.
    `interruptions`: a spot run's schedule (None: not interrupted)."""

    replicas: Replicas = Replicas()
    autoscaling: Autoscaling | None = None
    interruptions: Interruptions | None = None

    @classmethod
    def of(cls, replicas: Any = None, autoscaling: Any = None, interruptions: Any = None,
           *, where: str = "", node_count: int = 1) -> Replicated:
        """An autoscaling without replicas scales one replica between the defaults' bounds;
        an interrupted replica leaves through the balancer (one replica behind it)."""
        at = f"{where}." if where else ""
        reps = Replicas.of(replicas, f"{at}replicas")
        if node_count * reps.max > MAX_NODES:
            raise PlanError(f"{at}replicas.max: {reps.max} replicas of {node_count} node(s) "
                            f"each take {node_count * reps.max} nodes; at most {MAX_NODES}")
        return cls(reps, None if autoscaling is None else Autoscaling.of(autoscaling,
                                                                        f"{at}autoscaling"),
                   None if interruptions is None else Interruptions.of(interruptions,
                                                                       f"{at}interruptions"))

    def as_dict(self) -> dict:
        """As deployment.json and the manifest record it (absent parts null)."""
        return {"replicas": self.replicas.as_dict(),
                "autoscaling": None if self.autoscaling is None else self.autoscaling.as_dict(),
                "interruptions": (None if self.interruptions is None
                                  else self.interruptions.as_dict())}


@dataclass(frozen=True)
class SeveralModels:
    """Several models on one node; `bursts`: requests alternate between them in bursts of
    this many (None: each request draws its model by request_share)."""

    models: tuple[ModelSlot, ...]
    bursts: int | None = None

    @classmethod
    def of(cls, models: Any, bursts: Any = None, *, where: str = "") -> SeveralModels:
        at = f"{where}." if where else ""
        if not isinstance(models, list | tuple) or len(models) < 2:
            raise PlanError(f"{at}models: expected a list of 2 to {MAX_MODELS} models, "
                            f"got {_short(models)}")
        slots = ModelSlot.list_of(models, f"{at}models")
        total = sum(s.request_share for s in slots)
        if abs(total - 1.0) > 1e-6:
            raise PlanError(f"{at}models: the request_share values add to {total:g}, not 1")
        if sum(s.placement == "swapped" for s in slots) == 1:
            raise PlanError(f"{at}models: one swapped model has no other to swap with (make it "
                            "resident, or swap two or more)")
        if bursts is not None:
            bursts = _int(bursts, f"{at}model_bursts", 1, MAX_BURST)
        return cls(tuple(slots), bursts)

    def swapped(self) -> bool:
        return any(s.placement == "swapped" for s in self.models)


DeploymentPlan = Single | Replicated | SeveralModels


def capacity_of(value: Any, where: str = "capacity") -> str | None:
    """`capacity` (how the nodes are bought): on_demand | spot, or None when not said."""
    return None if value is None else _one_of(value, CAPACITIES, where)


def plan_of(doc: Mapping, where: str = "") -> DeploymentPlan:
    """The plan a candidate's keys (`replicas`, `autoscaling`, `interruptions`, `models`,
    `model_bursts`, with its `capacity` and `node_count`) describe."""
    at = f"{where}." if where else ""
    get = doc.get
    capacity = capacity_of(get("capacity"), f"{at}capacity")
    if get("interruptions") is not None and capacity != "spot":
        raise PlanError(f"{at}interruptions: only a spot run is interrupted (set capacity: spot)")
    if get("models") is not None:
        for key in ("replicas", "autoscaling", "interruptions"):
            if get(key) is not None:
                raise PlanError(f"{at}{key}: several models on one node are served by one "
                                "replica; `models` takes no replicas, autoscaling or "
                                "interruptions")
        return SeveralModels.of(get("models"), get("model_bursts"), where=where)
    if get("model_bursts") is not None:
        raise PlanError(f"{at}model_bursts: alternates between the candidate's `models`; it "
                        "has none")
    if all(get(key) is None for key in ("replicas", "autoscaling", "interruptions")):
        return Single()
    # an interrupted replica leaves through the balancer: one replica behind it at least
    node_count = get("node_count") or 1
    return Replicated.of(get("replicas"), get("autoscaling"), get("interruptions"), where=where,
                         node_count=_int(node_count, f"{at}node_count", 1, MAX_NODES))
