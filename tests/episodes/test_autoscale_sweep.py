"""Autoscaler settings are sweep keys (`autoscaling.target`, `autoscaling.scale_down_cooldown_s`,
`replicas.min`, ...): each member gets the base's mapping with the one setting changed and a
name that says it, a bad value is refused naming the member's key, and the shipped episode
sweep draws its curve over three targets."""

from __future__ import annotations

from pathlib import Path

import pytest
from servingbench.pipelines.catalog import load_file
from servingbench.pipelines.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
BASE = """
candidates:
  - {name: plain, instance_type: p5.48xlarge, model: m/x, precision: bf16, tensor_parallel: 8}
sweeps:
  auto:
    base:
      instance_type: p5.48xlarge
      model: m/x
      precision: bf16
      tensor_parallel: 8
      scenario: {kind: schedule, segments: [{duration_s: 10, rate: 2}]}
      replicas: {min: 0, max: 3, initial: 1}
      autoscaling: {policy: local, metric: rps, target: 4, activation_target: 0.5,
                    scale_up_cooldown_s: 0, scale_down_cooldown_s: 8}
    matrix:
"""


def sweep(tmp_path, matrix: str):
    p = tmp_path / "candidates.yaml"
    p.write_text(BASE + matrix)
    _, sweeps = load_file(p)
    return sweeps[0]


def test_autoscaler_settings_are_swept(tmp_path):
    s = sweep(tmp_path, "      autoscaling.target: [2, 8]\n"
                        "      autoscaling.scale_down_cooldown_s: [1]\n"
                        "      replicas.min: [0, 1]\n")
    got = {m.name: (m.deployment.autoscaling.target,
                    m.deployment.autoscaling.scale_down_cooldown_s, m.deployment.replicas.min,
                    m.deployment.replicas.max, m.deployment.autoscaling.metric)
           for m in s.members}
    assert got == {
        "auto-min0-target2-downcd1": (2.0, 1.0, 0, 3, "rps"),
        "auto-min1-target2-downcd1": (2.0, 1.0, 1, 3, "rps"),
        "auto-min0-target8-downcd1": (8.0, 1.0, 0, 3, "rps"),
        "auto-min1-target8-downcd1": (8.0, 1.0, 1, 3, "rps"),
    }
    assert s.keys == ("autoscaling.target", "autoscaling.scale_down_cooldown_s", "replicas.min")


def test_a_bad_swept_setting_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"replicas"):
        sweep(tmp_path, "      replicas.min: [5]\n")  # above max 3
    with pytest.raises(ConfigError, match=r"autoscaling"):
        sweep(tmp_path, "      autoscaling.metric: [gpu_util]\n")


def test_the_shipped_episode_sweep_draws_a_curve_over_targets():
    _, sweeps = load_file(ROOT / "pipelines" / "candidates_episodes.yaml")
    [s] = [s for s in sweeps if s.keys == ("autoscaling.target",)]
    assert [m.deployment.autoscaling.target for m in s.members] == [2.0, 4.0, 8.0]
    assert all(m.deployment.autoscaling.policy == "local" for m in s.members)
