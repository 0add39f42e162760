"""The local policy against the rule KEDA and the HPA document: desired = ceil(current ×
metric / target) with the 0.1 tolerance, stabilization windows (lowest recommendation
of the up window, highest of the down window), KEDA's activation 0 → 1 and its cooldown
back to 0, and the min/max bounds."""

from __future__ import annotations

import pytest
from servingbench.resources.contract.deployment import Replicated
from servingbench.resources.model_server.fleet.autoscale_rule import (
    Policy,
    State,
    decide,
    raw_recommendation,
)


def policy(**kw) -> Policy:
    args = dict(metric="requests_waiting", target=100.0, activation_target=0.0,
                scale_up_cooldown_s=0.0, scale_down_cooldown_s=0.0, min_replicas=1,
                max_replicas=20)
    args.update(kw)
    return Policy(**args)


@pytest.mark.parametrize(("current", "average", "want"), [
    # the HPA docs' own examples: 200m against a 100m target doubles, 50m halves
    (3, 200.0, 6), (4, 50.0, 2),
    # ceil, not round: 1 replica at 1.5 × target needs 2
    (1, 150.0, 2), (3, 130.0, 4),
    # within the 0.1 tolerance nothing moves (1.05 and 0.95), just past it it does
    (4, 105.0, 4), (4, 95.0, 4), (4, 111.0, 5),
])
def test_the_hpa_formula(current, average, want):
    assert raw_recommendation(current, average * current, policy()) == want


def test_activation_from_zero_is_keda_s_threshold():
    p = policy(activation_target=2.0, min_replicas=0)
    assert decide(0.0, 0, 2.0, p, State()) == 0  # at the threshold: not active
    assert decide(0.0, 0, 2.5, p, State()) == 1  # above it: one replica, at once
    # even far above it, activation gives one replica; the HPA's rule takes it from there
    assert decide(0.0, 0, 1000.0, p, State()) == 1


def test_back_to_zero_only_after_the_cooldown_since_last_active():
    p = policy(activation_target=1.0, min_replicas=0, scale_down_cooldown_s=30.0)
    s = State()
    assert decide(0.0, 1, 50.0, p, s) == 1  # active at t=0
    assert decide(10.0, 1, 0.0, p, s) == 1  # inactive 10 s: kept
    assert decide(29.0, 1, 0.0, p, s) == 1
    assert decide(30.0, 1, 0.0, p, s) == 0  # inactive for the whole cooldown: to zero
    # a workload that cannot go to zero never does
    s = State()
    q = policy(activation_target=1.0, min_replicas=1, scale_down_cooldown_s=30.0)
    decide(0.0, 1, 50.0, q, s)
    assert decide(100.0, 1, 0.0, q, s) == 1


def test_scale_down_takes_the_highest_recommendation_of_its_window():
    p = policy(scale_down_cooldown_s=60.0)
    s = State()
    assert decide(0.0, 4, 400.0, p, s) == 4  # exactly on target
    assert decide(20.0, 4, 100.0, p, s) == 4  # would be 1: the window still holds 4
    assert decide(59.0, 4, 100.0, p, s) == 4
    assert decide(61.0, 4, 100.0, p, s) == 1  # the 4 has left the window


def test_scale_up_takes_the_lowest_recommendation_of_its_window():
    p = policy(scale_up_cooldown_s=10.0, scale_down_cooldown_s=300.0)
    s = State()
    assert decide(0.0, 2, 200.0, p, s) == 2
    assert decide(5.0, 2, 800.0, p, s) == 2  # a 5 s burst: the window's lowest is 2
    assert decide(11.0, 2, 800.0, p, s) == 8  # lasted the window: up to 8
    # without an up window (the HPA default) it goes at once
    assert decide(0.0, 2, 800.0, policy(), State()) == 8


def test_bounds_clamp_the_result():
    assert decide(0.0, 2, 10_000.0, policy(max_replicas=5), State()) == 5
    assert decide(0.0, 4, 0.0, policy(min_replicas=2), State()) == 2


def test_the_policy_reads_the_plans_numbers_and_defaults():
    # the numbers are checked where the plan is made (test_deployment_plan.py); the rule
    # takes them as they are, defaults included
    plan = Replicated.of({"min": 0, "max": 5}, {"metric": "rps", "target": 2})
    p = Policy.of(plan.autoscaling, plan.replicas)
    assert (p.metric, p.target, p.activation_target, p.scale_up_cooldown_s,
            p.scale_down_cooldown_s, p.min_replicas, p.max_replicas) == (
        "rps", 2.0, 0.0, 0.0, 300.0, 0, 5)
