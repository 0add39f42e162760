"""A candidate's `replicas`, `autoscaling` and schedule scenario (contract §2.1): the shipped
episodes file loads, and every mistake names its key."""

from __future__ import annotations

from pathlib import Path

import pytest
from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.config import ConfigError
from servingbench.resources.contract.deployment import Replicas

ROOT = Path(__file__).resolve().parents[2]
GOOD = ("name: c1, instance_type: p5.48xlarge, "
        "model: meta-llama/Llama-4-Scout-17B-16E-Instruct, precision: bf16, tensor_parallel: 8")


def write(tmp_path, extra: str) -> Path:
    p = tmp_path / "candidates.yaml"
    p.write_text(f"candidates:\n  - {{{GOOD}, {extra}}}\n")
    return p


def test_the_shipped_episodes_load_with_their_replicas_and_policy():
    by_name = {c.name: c for c in load_candidates(ROOT / "pipelines" / "candidates_episodes.yaml")}
    spike, zero = by_name["p5-scout-bf16-tp8-spike"], by_name["p5-scout-bf16-tp8-from-zero"]
    assert spike.deployment.replicas == Replicas(min=1, max=3, initial=1)
    scaling = spike.deployment.autoscaling
    assert scaling.policy == "local" and scaling.target == 3.0
    assert spike.scenario["kind"] == "schedule" and spike.scenario["shape"] == "spike"
    assert zero.deployment.replicas.min == 0 and zero.deployment.autoscaling.metric == "rps"


def test_a_day_csv_is_relative_to_the_candidates_file(tmp_path):
    (tmp_path / "day.csv").write_text("hour,rate\n" + "".join(f"{h},1\n" for h in range(24)))
    (c,) = load_candidates(write(tmp_path, "scenario: {kind: schedule, shape: day, day_csv: day.csv}"))
    assert c.scenario["day_csv"] == str(tmp_path / "day.csv")


@pytest.mark.parametrize(("extra", "says"), [
    ("replicas: {min: 2, max: 1}", r"candidates\[0\].replicas: expected min <= initial <= max, "
                                   "got 2, 2, 1"),
    ("replicas: {min: 1, max: 3, start: 1}", r"candidates\[0\].replicas.start: unknown key"),
    ("replicas: {max: 0}", r"candidates\[0\].replicas.max: expected an integer in \[1, 64\]"),
    ("replicas: {max: 2}, autoscaling: {metric: gpu_util, target: 1}",
     r"candidates\[0\].autoscaling.metric: 'gpu_util' is not one of"),
    ("replicas: {max: 2}, autoscaling: {metric: rps, target: 0}",
     r"candidates\[0\].autoscaling.target: expected a finite number in \(0, "),
    ("replicas: {max: 2}, autoscaling: {metric: rps, target: 1, policy: kd}",
     r"candidates\[0\].autoscaling.policy: 'kd' is not one of keda, hpa, local"),
    ("replicas: {max: 2}, autoscaling: {metric: rps, target: 1, cooldown: 3}",
     r"candidates\[0\].autoscaling.cooldown: unknown key"),
    ("scenario: {kind: schedule, shape: spike, peak_rate: -2}",
     r"candidates\[0\].scenario.peak_rate"),
])
def test_a_bad_replica_or_autoscaling_key_is_named(tmp_path, extra, says):
    with pytest.raises(ConfigError, match=says):
        load_candidates(write(tmp_path, extra))
