"""A candidate's deployment plan (resources/contract/deployment.py) is checked once, where it is
made: every replica count bounded by the node cap (node_count × replicas.max <= 64 too),
every autoscaling and interruption number finite and bounded (a cooldown over the HPA's
hour is refused at the candidates check, not at apply once the node group is up), each
mistake naming its key, from the candidates check, `sweep list`, `run` and `demo` (exit 2,
nothing written). The rules live in that one file: a test reads the product code for them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.cli import main as cli
from servingbench.pipelines.config import ConfigError
from servingbench.resources.contract.deployment import (
    MAX_NODES,
    Autoscaling,
    Interruptions,
    Replicas,
    Replicated,
    Single,
    plan_of,
)

from tests.support.runbuilder import clean_run

ROOT = Path(__file__).resolve().parents[2]
GOOD = ("name: c1, instance_type: p5.48xlarge, "
        "model: meta-llama/Llama-4-Scout-17B-16E-Instruct, precision: bf16, tensor_parallel: 8")
SCALED = "replicas: {max: 4}, autoscaling: {metric: rps, target: 2"

# the candidate's keys -> what the message must name (after `candidates[0].`)
BAD = {
    "a fork storm of replicas": ("replicas: {min: 0, initial: 5000, max: 100000}",
                                 r"replicas\.max: expected an integer in \[1, 64\], got 100000"),
    "initial past the cap": ("replicas: {initial: 5000}",
                             r"replicas\.initial: expected an integer in \[0, 64\], got 5000"),
    "replicas × node_count past the cap": ("node_count: 2, replicas: {max: 40}",
                                           r"replicas\.max: 40 replicas of 2 node\(s\) each take "
                                           r"80 nodes; at most 64"),
    "a cooldown of .inf": (SCALED + ", scale_down_cooldown_s: .inf}",
                           r"autoscaling\.scale_down_cooldown_s: expected a finite number in "
                           r"\[0, 3600\], got inf"),
    "a cooldown over the HPA's hour": (SCALED + ", scale_up_cooldown_s: 3601}",
                                       r"autoscaling\.scale_up_cooldown_s: expected a finite "
                                       r"number in \[0, 3600\], got 3601"),
    "a target of .nan": ("replicas: {max: 4}, autoscaling: {metric: rps, target: .nan}",
                         r"autoscaling\.target: expected a finite number in \(0, 1e\+09\], got nan"),
    "an activation of .inf": (SCALED + ", activation_target: .inf}",
                              r"autoscaling\.activation_target: expected a finite number"),
    "a negative cooldown": (SCALED + ", scale_down_cooldown_s: -1}",
                            r"autoscaling\.scale_down_cooldown_s: expected a finite number"),
    "a rate of .inf": ("capacity: spot, interruptions: {rate_per_hour: .inf}",
                       r"interruptions\.rate_per_hour: expected a finite number in \(0, 3600\]"),
    "a time of .inf": ("capacity: spot, interruptions: {at: [.inf]}",
                       r"interruptions\.at: expected a finite number in \[0, 86400\], got inf"),
    "a notice of .nan": ("capacity: spot, interruptions: {at: [5], notice_s: .nan}",
                         r"interruptions\.notice_s: expected a finite number in \(0, 900\]"),
    "a seed past 64 bits": ("capacity: spot, interruptions: {rate_per_hour: 1, seed: "
                            "100000000000000000000000}", r"interruptions\.seed: expected an "
                                                         r"integer in \[0, "),
}


def _file(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "candidates.yaml"
    path.write_text(f"candidates:\n  - {{{GOOD}, {extra}}}\n")
    return path


@pytest.mark.parametrize("case", list(BAD))
def test_the_candidates_check_names_the_key(tmp_path, case):
    extra, message = BAD[case]
    with pytest.raises(ConfigError, match=r"candidates\.yaml: candidates\[0\]\." + message):
        load_candidates(_file(tmp_path, extra))


@pytest.mark.parametrize("case", ["a fork storm of replicas", "a cooldown of .inf",
                                  "a cooldown over the HPA's hour", "a target of .nan"])
def test_sweep_list_run_and_the_demo_exit_2_naming_the_key(tmp_path, case, capsys, monkeypatch):
    extra, message = BAD[case]
    path = _file(tmp_path, extra)
    assert cli(["sweep", "list", "--candidates", str(path)]) == 2
    assert re.search(r"candidates\[0\]\." + message, capsys.readouterr().err)
    assert cli(["demo", "--candidates", str(path), "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert re.search(r"candidates\[0\]\." + message, err) and "Traceback" not in err
    for k, v in {"SERVINGBENCH_CANDIDATES": str(path), "DAGSTER_HOME": str(tmp_path / "dh"),
                 "SERVINGBENCH_DATA_DIR": str(tmp_path / "data")}.items():
        monkeypatch.setenv(k, v)
    assert cli(["run", "--candidate", "c1"]) == 2
    assert re.search(r"candidates\[0\]\." + message, capsys.readouterr().err)
    assert not (tmp_path / "data").exists() and not (tmp_path / "dh").exists()


def test_defaults_are_the_plans_own():
    assert plan_of({}) == Single()
    # an autoscaling alone scales one replica; an interrupted run has one behind the balancer
    plan = plan_of({"autoscaling": {"metric": "rps", "target": 2}})
    assert plan == Replicated(Replicas(1, 1, 1), Autoscaling("local", "rps", 2.0))
    assert plan.autoscaling.scale_down_cooldown_s == 300.0
    spot = plan_of({"capacity": "spot", "interruptions": {"rate_per_hour": 6}})
    assert spot.replicas == Replicas(1, 1, 1)
    assert spot.interruptions == Interruptions(rate_per_hour=6.0, seed=0, notice_s=120.0)
    assert Replicas.of({"min": 0, "max": 3}) == Replicas(0, 3, 1)
    assert Replicas.of({"max": MAX_NODES}).max == MAX_NODES


def test_a_manifest_is_read_by_the_same_rules(tmp_path, capsys):
    # a run folder whose manifest claims 100,000 replicas is malformed input, named
    run_dir = clean_run().write(tmp_path / "run")
    m = json.loads((run_dir / "manifest.json").read_text())
    m["replicas"] = {"min": 0, "max": 100_000, "initial": 5000}
    (run_dir / "manifest.json").write_text(json.dumps(m))
    assert cli(["analyze", str(run_dir)]) == 2
    assert "manifest.replicas.max: expected an integer in [1, 64]" in capsys.readouterr().err


# Each rule of the plan, as product code would spell it again: the key list, the ordering of
# the replica counts, the scale-down default, the interruption rate's and notice's bounds,
# the policies', metrics', placements' and capacities' sets, the models' share rule. The
# emulator (emulator/, which imports nothing of servingbench) keeps its own copy of the
# placements by design.
RULES = re.compile(r'"min", "max", "initial"|<= ?initial|initial ?<=|'
                   r"scale_down_cooldown_s\W{1,6}(?:float\W{1,4})?300|"
                   r"rate_per_hour.{0,60}\b3600\b|notice_s.{0,60}\b(?:900|120)\b|"
                   r'"keda", "hpa", "local"|"requests_waiting", "requests_running"|'
                   r'"resident", "swapped"|"on_demand", "spot"\)|request_share values add')
PRODUCT = ("pipelines", "assets", "resources")
HOME = ROOT / "resources" / "contract" / "deployment.py"


def test_the_plans_rules_are_spelt_in_one_file():
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
             for folder in PRODUCT for p in sorted((ROOT / folder).rglob("*.py")) if p != HOME
             for n, line in enumerate(p.read_text().splitlines(), 1) if RULES.search(line)]
    assert found == [], "the deployment plan's rules spelt outside contract/deployment.py"
    # the guard matches something: every rule is in the plan's own file
    home = HOME.read_text()
    assert len({m.group(0)[:12] for m in RULES.finditer(home)}) >= 6
