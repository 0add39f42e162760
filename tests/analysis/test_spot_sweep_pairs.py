"""spot_pairs of a sweep over `capacity` (contract §3.8): its on-demand and spot members have
two candidate names (`<sweep>-on-demand`, `<sweep>-spot`) for one configuration, and pair
under the sweep's name and its other settings; members differing in another setting do not
pair with each other."""

from __future__ import annotations

import pytest
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.analysis.spot import pair_name, pairs_of_folders
from servingbench.resources.contract import manifest as mf

from tests.support.runbuilder import HOUR_MS, RunBuilder, clean_run


def member(run_id: str, sweep: str, settings: dict, rate: float) -> RunBuilder:
    spot = settings["capacity"] == "spot"
    name = "-".join([sweep, *(str(v).replace("_", "-") for v in settings.values())])
    b = RunBuilder(run_id, candidate=name, created_ns=mf.parse_ts("2026-11-28T00:00:00Z"),
                   capacity=settings["capacity"], sweep={"name": sweep, "settings": settings})
    b.requests, b.chunks = clean_run().requests, clean_run().chunks
    for row in b.requests + b.chunks:
        row["run_id"] = run_id
    b.bill_row(0, HOUR_MS, rate, 1.0,
               usage_type=f"USE1-{'SpotUsage' if spot else 'BoxUsage'}:p5.48xlarge")
    return b


def test_a_capacity_sweep_pairs_its_members_by_their_other_settings(tmp_path):
    runs = [("od-a", {"precision": "bf16", "capacity": "on_demand"}, 55.04),
            ("spot-a", {"precision": "bf16", "capacity": "spot"}, 24.8),
            ("od-b", {"precision": "fp8", "capacity": "on_demand"}, 55.04)]
    dirs = []
    for run_id, settings, rate in runs:
        d = member(run_id, "s", settings, rate).write(tmp_path / run_id)
        assert analyze_run(d).exit_code == 0
        dirs.append(d)
    (row,) = pairs_of_folders(dirs).to_pylist()
    assert (row["candidate"], row["on_demand_run_id"], row["spot_run_id"]) == (
        "s-precision=bf16", "od-a", "spot-a")
    assert row["effective_discount"] == pytest.approx(1 - 24.8 / 55.04)  # same tokens, window


def test_a_run_outside_a_capacity_sweep_pairs_by_its_candidate():
    assert pair_name({"candidate": "c", "run_id": "r", "sweep": None}) == "c"
    assert pair_name({"candidate": "s-tp8", "run_id": "r",
                      "sweep": {"name": "s", "settings": {"tensor_parallel": 8}}}) == "s-tp8"
    assert pair_name({"candidate": "s-spot", "run_id": "r",
                      "sweep": {"name": "s", "settings": {"capacity": "spot"}}}) == "s"
