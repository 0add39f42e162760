"""A candidate's `capacity` and `interruptions` (contract §2.1, §3.8): checked with the key
named, a sweep key that runs the same candidate on-demand and on spot, the spot price of the
sheet as the price basis, and the manifest's `capacity`."""

from __future__ import annotations

from pathlib import Path

import pytest
from servingbench.assets.benchmark import initial_manifest
from servingbench.pipelines.catalog import load_file
from servingbench.pipelines.cli import main as cli
from servingbench.pipelines.config import ConfigError
from servingbench.resources.contract.deployment import Interruptions, Replicas
from servingbench.resources.loadgen.generator import LoadGenerator

ROOT = Path(__file__).resolve().parents[2]
GOOD = ("name: c1, instance_type: p5.48xlarge, "
        "model: meta-llama/Llama-4-Scout-17B-16E-Instruct, precision: bf16, tensor_parallel: 8")
SHEET = {"price": {"region": "us-east-1", "sheet": str(ROOT / "pipelines" / "price_sheet.yaml")}}


def write(tmp_path, extra: str, sheet: bool = True) -> Path:
    p = tmp_path / "candidates.yaml"
    price = f", price: {{region: us-east-1, sheet: {SHEET['price']['sheet']}}}" if sheet else ""
    p.write_text(f"candidates:\n  - {{{GOOD}{price}, {extra}}}\n")
    return p


@pytest.mark.parametrize(("extra", "says"), [
    ("capacity: reserved", r"candidates\[0\].capacity: 'reserved' is not one of on_demand, spot"),
    ("capacity: 1", r"candidates\[0\].capacity: expected on_demand or spot"),
    ("interruptions: {at: [5]}", r"candidates\[0\].interruptions: only a spot run"),
    ("capacity: spot, interruptions: {at: [-1]}", r"candidates\[0\].interruptions.at: expected"),
    ("capacity: spot, interruptions: {at: []}", r"candidates\[0\].interruptions.at: expected"),
    ("capacity: spot, interruptions: {}", r"candidates\[0\].interruptions: give either at"),
    ("capacity: spot, interruptions: {at: [1], rate_per_hour: 2}",
     r"candidates\[0\].interruptions: give either at"),
    ("capacity: spot, interruptions: {rate_per_hour: 0}",
     r"candidates\[0\].interruptions.rate_per_hour: expected"),
    ("capacity: spot, interruptions: {rate_per_hour: 2, seed: -1}",
     r"candidates\[0\].interruptions.seed: expected"),
    ("capacity: spot, interruptions: {at: [1], notice_s: 0}",
     r"candidates\[0\].interruptions.notice_s: expected"),
    ("capacity: spot, interruptions: {at: [1], when: 2}",
     r"candidates\[0\].interruptions.when: unknown key"),
    ("load: {retry_interrupted: 1}", r"candidates\[0\].load.retry_interrupted: expected true"),
])
def test_a_bad_value_names_its_key(tmp_path, extra, says):
    with pytest.raises(ConfigError, match=says):
        load_file(write(tmp_path, extra))


def test_a_spot_candidate_without_a_spot_price_names_the_sheet(tmp_path):
    p = write(tmp_path, "capacity: spot").read_text().replace("p5.48xlarge", "trn2.48xlarge")
    (tmp_path / "candidates.yaml").write_text(p)
    with pytest.raises(ConfigError, match=r"capacity: spot, but the price sheet .* no "
                                          r"price_bases.spot price for trn2.48xlarge"):
        load_file(tmp_path / "candidates.yaml")


def test_the_demo_exits_2_naming_the_key(tmp_path, capsys):
    path = write(tmp_path, "capacity: spot, interruptions: {at: [-1]}")
    assert cli(["demo", "--candidates", str(path), "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert "interruptions.at" in err and "Traceback" not in err


def test_the_shipped_sweep_runs_one_candidate_on_demand_and_on_spot():
    _, sweeps = load_file(ROOT / "pipelines" / "candidates_episodes.yaml")
    (sweep,) = [s for s in sweeps if "capacity" in s.keys]
    od, spot = sweep.members
    assert (od.name, spot.name) == ("p5-scout-bf16-tp8-steady-on-demand",
                                    "p5-scout-bf16-tp8-steady-spot")
    assert (od.capacity, od.deployment.interruptions) == ("on_demand", None)
    assert spot.capacity == "spot"
    assert spot.deployment.interruptions == Interruptions(at=(8.0, 18.0), notice_s=3.0)
    assert od.deployment.replicas == spot.deployment.replicas == Replicas(2, 2, 2)
    # the bill's price: the sheet's on-demand and spot figures, each labelled by its option
    assert (od.price.purchase_option, od.price.hourly_usd_per_node) == ("on_demand", 55.04)
    assert (spot.price.purchase_option, spot.price.hourly_usd_per_node) == ("spot", 24.80)
    assert od.price.bases == spot.price.bases  # the same what-if bases for both
    m = initial_manifest(spot, "run-1", "emulated")
    assert m["capacity"] == "spot" and m["price_basis"]["purchase_option"] == "spot"
    assert m["sweep"]["settings"] == {"capacity": "spot"}
    assert initial_manifest(od, "run-2", "emulated")["capacity"] == "on_demand"
    assert LoadGenerator().config(spot, "http://127.0.0.1:1", "m", "run-1").retry_interrupted


def test_a_candidate_without_capacity_says_none_and_interruptions_bring_a_balancer(tmp_path):
    (plain,), _ = load_file(write(tmp_path, "engine: vllm"))
    assert plain.capacity is None and "capacity" not in initial_manifest(plain, "r", "emulated")
    (spot,), _ = load_file(write(tmp_path, "capacity: spot, interruptions: "
                                           "{rate_per_hour: 60, seed: 7}"))
    assert spot.deployment.interruptions == Interruptions(rate_per_hour=60.0, seed=7,
                                                          notice_s=120.0)
    assert spot.deployment.replicas == Replicas(1, 1, 1)


def test_the_interruption_times_are_capped(tmp_path):
    from servingbench.resources.contract.deployment import MAX_AT_ENTRIES

    many = ", ".join(str(i) for i in range(MAX_AT_ENTRIES + 1))
    with pytest.raises(ConfigError, match=r"candidates\[0\]\.interruptions\.at: expected a list "
                                          r"of 1 to 1,000 seconds"):
        load_file(write(tmp_path, f"capacity: spot, interruptions: {{at: [{many}]}}"))
    fits = ", ".join(str(i) for i in range(MAX_AT_ENTRIES))
    load_file(write(tmp_path, f"capacity: spot, interruptions: {{at: [{fits}]}}"))
