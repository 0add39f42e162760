"""The `local` autoscaling policy: the rule KEDA and the Kubernetes HPA apply, as a pure
function of time, the current replica count and one metric reading.

HPA (autoscaling/v2, an `AverageValue` target, which is how KEDA feeds it a Prometheus
query): `desired = ceil(current × average / target)`, the average being the metric's total
over the current replicas, so `ceil(total / target)`; no change while the ratio
`average / target` is within the tolerance (0.1) of 1. Stabilization (HPA `behavior`): a
scale-up takes the LOWEST recommendation of the last `scale_up_cooldown_s`, a scale-down
the HIGHEST of the last `scale_down_cooldown_s` (so one low reading never removes a
replica, and a burst must last the up window before it adds one).

KEDA around it: the `activation_target` decides 0 ↔ 1. From zero, a reading above it
activates the workload (1 replica, at once; the HPA takes over from there). With
`min_replicas` 0, a workload whose reading stayed at or below it for
`scale_down_cooldown_s` (KEDA's `cooldownPeriod`) since it was last active goes back to 0.
The result is clamped to [min_replicas, max_replicas].

docs/episodes.md says what this emulates and what it leaves out (the HPA's 15 s sync
period and KEDA's polling interval are the controller loop's interval; no pod readiness
delay beyond the replica's own start-up; no scaling rate policies)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from servingbench.resources.contract.deployment import Autoscaling, Replicas

TOLERANCE = 0.1  # the HPA's default --horizontal-pod-autoscaler-tolerance


@dataclass(frozen=True)
class Policy:
    """The rule's parameters: a candidate's `autoscaling` and its replicas' bounds, checked
    where the plan is made (resources/contract/deployment.py), read here as they are."""

    metric: str
    target: float  # per replica (AverageValue)
    scale_down_cooldown_s: float  # HPA scaleDown window and KEDA cooldownPeriod
    min_replicas: int
    max_replicas: int
    activation_target: float = 0.0
    scale_up_cooldown_s: float = 0.0  # HPA scaleUp stabilizationWindowSeconds
    tolerance: float = TOLERANCE

    @classmethod
    def of(cls, autoscaling: Autoscaling, replicas: Replicas) -> Policy:
        return cls(metric=autoscaling.metric, target=autoscaling.target,
                   activation_target=autoscaling.activation_target,
                   scale_up_cooldown_s=autoscaling.scale_up_cooldown_s,
                   scale_down_cooldown_s=autoscaling.scale_down_cooldown_s,
                   min_replicas=replicas.min, max_replicas=replicas.max)


@dataclass
class State:
    """What the rule remembers between readings: its recommendations (time, count) within
    the longest window, and when the workload was last active."""

    recommendations: list[tuple[float, int]] = field(default_factory=list)
    last_active: float | None = None


def raw_recommendation(current: int, total: float, p: Policy) -> int:
    """The HPA's formula on one reading, before stabilization and bounds; from zero, KEDA's
    activation."""
    if current == 0:
        return 1 if total > p.activation_target else 0
    ratio = (total / current) / p.target
    if abs(ratio - 1.0) <= p.tolerance:
        return current
    return math.ceil(current * ratio)


def decide(now: float, current: int, total: float, p: Policy, state: State) -> int:
    """The desired replica count at `now` (seconds, any monotonic origin) for a metric
    reading `total` (summed over the current replicas; requests/s for `rps`)."""
    active = total > p.activation_target
    if active:
        state.last_active = now
    raw = raw_recommendation(current, total, p)
    keep = max(p.scale_up_cooldown_s, p.scale_down_cooldown_s)
    state.recommendations = [(t, r) for t, r in state.recommendations if t > now - keep]
    state.recommendations.append((now, raw))
    if current == 0:
        desired = raw  # activation is immediate (KEDA scales 0 -> 1 on the reading)
    else:
        up = min(r for t, r in state.recommendations if t > now - p.scale_up_cooldown_s or t == now)
        down = max(r for t, r in state.recommendations
                   if t > now - p.scale_down_cooldown_s or t == now)
        desired = current
        if desired < up:
            desired = up
        if desired > down:
            desired = down
    # KEDA: back to zero only when allowed and inactive for the whole cooldown
    floor = p.min_replicas
    if floor == 0 and current > 0:
        idle_for = math.inf if state.last_active is None else now - state.last_active
        floor = 0 if not active and idle_for >= p.scale_down_cooldown_s else 1
    return max(floor, min(p.max_replicas, desired))
