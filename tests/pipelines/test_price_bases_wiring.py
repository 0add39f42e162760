"""Where a run's what-if prices come from (contract §2.1 `price_bases`): the embedded
default's price sheet (unverified, price_source price_sheet), replaced once by the eks
profile's lookup when the bill is fetched, never again on a refetch."""

from __future__ import annotations

import pytest
from servingbench.assets.benchmark import initial_manifest
from servingbench.assets.bill import _record_price_bases
from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.config import ConfigError
from servingbench.resources.contract import manifest as mf

from tests.support.runbuilder import clean_run


def test_the_price_sheet_bases_reach_the_manifest_labelled_unverified():
    cand = {c.name: c for c in load_candidates()}["p5-scout-bf16-tp8"]
    m = initial_manifest(cand, "run-1", "emulated")
    bases = {b["basis"]: b for b in m["price_bases"]}
    assert set(bases) == {"on_demand", "spot", "reserved_1yr", "reserved_3yr",
                          "savings_plan_1yr", "savings_plan_3yr", "capacity_block"}
    assert {(b["price_source"], b["retrieved_on"]) for b in bases.values()} == {
        ("price_sheet", "unverified")}
    assert bases["on_demand"]["hourly_usd_per_node"] == m["price_basis"]["hourly_usd_per_node"]
    mf.validate(m)
    # g6e has no Capacity Block entry in the sheet: no row for it, never a guess
    g6e = {c.name: c for c in load_candidates()}["g6e-scout-bf16-tp8"]
    assert "capacity_block" not in {b["basis"] for b in g6e.price.bases}


def test_an_unknown_basis_in_the_sheet_names_the_key(tmp_path):
    sheet = tmp_path / "sheet.yaml"
    sheet.write_text("region: us-east-1\npurchase_option: on_demand\nretrieved_on: x\n"
                     "hourly_usd_per_node: {p5.48xlarge: 1.0}\n"
                     "price_bases: {spot_price: {p5.48xlarge: 0.5}}\n")
    cands = tmp_path / "c.yaml"
    cands.write_text("candidates:\n  - {name: a, instance_type: p5.48xlarge, model: m, "
                     f"precision: bf16, tensor_parallel: 8, price: {{sheet: {sheet}}}}}\n")
    with pytest.raises(ConfigError, match="sheet.yaml: price_bases.spot_price: unknown key"):
        load_candidates(cands)


class _Lookup:
    def __init__(self, found):
        self.found, self.calls = found, 0

    def price_bases(self, manifest):
        self.calls += 1
        return self.found


SPOT = {"basis": "spot", "hourly_usd_per_node": 21.0, "price_source": "spot_price_history",
        "retrieved_on": "2026-11-28", "region": "us-east-1"}
SHEET = {"basis": "spot", "hourly_usd_per_node": 24.8, "price_source": "price_sheet",
         "retrieved_on": "unverified", "region": "us-east-1"}


def test_the_lookup_replaces_the_sheet_once(tmp_path):
    b = clean_run()
    b.manifest["price_bases"] = [SHEET]
    run = b.write(tmp_path / "run")
    m = mf.load(run / "manifest.json")
    source = _Lookup([SPOT])
    _record_price_bases(source, m, run)
    assert mf.load(run / "manifest.json")["price_bases"] == [SPOT]
    # a refetch of the bill keeps what was looked up when the run was made
    _record_price_bases(_Lookup([dict(SPOT, hourly_usd_per_node=99.0)]),
                        mf.load(run / "manifest.json"), run)
    assert mf.load(run / "manifest.json")["price_bases"] == [SPOT]


def test_without_a_lookup_the_sheet_stays(tmp_path):
    b = clean_run()
    b.manifest["price_bases"] = [SHEET]
    run = b.write(tmp_path / "run")
    _record_price_bases(_Lookup(None), mf.load(run / "manifest.json"), run)
    assert mf.load(run / "manifest.json")["price_bases"] == [SHEET]
