"""contract §4.1 by hand: every price basis of the manifest priced over each step's window,
per 1M output and total tokens; never in the billed columns; no file without price bases,
none for a rejected run, one for a run without a bill."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.outputs import COST_WHAT_IF

from tests.support.runbuilder import RunBuilder, clean_run

# basis -> (hourly USD per node, price_source)
BASES = {
    "on_demand": (55.04, "price_list"), "spot": (21.0, "spot_price_history"),
    "reserved_1yr": (38.5, "price_list"), "reserved_3yr": (24.0, "price_list"),
    "savings_plan_1yr": (40.0, "price_list"), "savings_plan_3yr": (27.5, "price_list"),
    "capacity_block": (31.464, "capacity_block_offering"),
}


def _bases() -> list[dict]:
    return [{"basis": b, "hourly_usd_per_node": p, "price_source": s,
             "retrieved_on": "2026-11-28", "region": "us-east-1"} for b, (p, s) in BASES.items()]


def test_what_if_arithmetic_per_basis_two_nodes_without_a_bill(tmp_path):
    # two nodes, one step c=1: window [0, 400 ms], 4 output tokens, 512 input tokens
    b = RunBuilder(node_count=2, price_bases=_bases())
    b.request("c=1", phase="warmup", sent=0, chunks=[(50, 1)], finished=60)
    b.request("c=1", sent=1000, chunks=[(1100, 1), (1200, 1), (1300, 1), (1400, 1)],
              finished=1400)
    result = analyze_run(b.write(tmp_path / "run", bill=False))
    assert result.exit_code == 0 and result.cost is None
    rows = pq.read_table(tmp_path / "run" / "cost_what_if.parquet")
    assert rows.schema.names == COST_WHAT_IF.names
    got = {r["basis"]: r for r in rows.to_pylist()}
    assert list(got) == list(BASES)  # the manifest's order
    for basis, (price, source) in BASES.items():
        usd = 2 * price * 0.4 / 3600          # node_count × hourly × window_s / 3600
        r = got[basis]
        assert r["cost_per_1m_output_usd"] == pytest.approx(usd / 4 * 1e6, rel=1e-12), basis
        assert r["cost_per_1m_total_usd"] == pytest.approx(usd / 516 * 1e6, rel=1e-12), basis
        assert (r["price_source"], r["hourly_usd_per_node"], r["step"]) == (source, price, "c=1")
        assert (r["run_id"], r["source"], r["region"]) == ("run-1", "emulated", "us-east-1")
    # spot by hand: 2 × 21 × 0.4 / 3600 / 4 × 1e6 = 1166.67 USD per 1M output tokens
    assert got["spot"]["cost_per_1m_output_usd"] == pytest.approx(1166.6666666, rel=1e-9)


def test_what_if_never_enters_the_billed_columns(tmp_path):
    b = clean_run()
    b.manifest["price_bases"] = _bases()
    result = analyze_run(b.write(tmp_path / "run"))
    (billed,) = result.cost.to_pylist()
    # the bill (price sheet at 55.04) is what it was; spot at 21 USD/h is only in what-if
    assert billed["cost_per_1m_output_usd"] == pytest.approx(55.04 * 0.4 / 3600 / 9 * 1e6)
    assert result.frontier.column("cost_per_1m_output_usd").to_pylist() == [
        billed["cost_per_1m_output_usd"]]
    spot = [r for r in result.what_if.to_pylist() if r["basis"] == "spot"][0]
    assert spot["cost_per_1m_output_usd"] == pytest.approx(21.0 * 0.4 / 3600 / 9 * 1e6)
    assert spot["cost_per_1m_total_usd"] == pytest.approx(21.0 * 0.4 / 3600 / 1545 * 1e6)


def test_null_input_tokens_leave_the_total_null(tmp_path):
    b = RunBuilder(price_bases=_bases()[:1])
    b.request("c=1", phase="warmup", sent=0, chunks=[(50, 1)], finished=60)
    b.request("c=1", sent=1000, chunks=[(1100, 1), (1200, 1)], finished=1200, input_tokens=None)
    result = analyze_run(b.write(tmp_path / "run", bill=False))
    (row,) = result.what_if.to_pylist()
    assert row["cost_per_1m_total_usd"] is None
    assert row["cost_per_1m_output_usd"] == pytest.approx(55.04 * 0.2 / 3600 / 2 * 1e6)


def test_no_price_bases_no_file_and_a_rejected_run_none(tmp_path):
    result = analyze_run(clean_run().write(tmp_path / "plain"))
    assert result.what_if is None and not (tmp_path / "plain" / "cost_what_if.parquet").exists()
    b = clean_run()
    b.manifest["price_bases"] = _bases()
    run = b.write(tmp_path / "rejected")
    assert analyze_run(run).exit_code == 0 and (run / "cost_what_if.parquet").exists()
    b.bill[0]["region"] = "eu-west-1"  # rule 5 fails on re-analysis: the stale file goes
    b.write_bill(run)
    assert analyze_run(run).exit_code == 3
    assert not (run / "cost_what_if.parquet").exists()


@pytest.mark.parametrize("entry, message", [
    ({"basis": "hourly", "hourly_usd_per_node": 1.0, "price_source": "price_list"},
     "price_bases[0].basis: \"hourly\" is not one of"),
    ({"basis": "spot", "hourly_usd_per_node": 1.0, "price_source": "guess"},
     "price_bases[0].price_source"),
    ({"basis": "spot", "hourly_usd_per_node": 0.0, "price_source": "spot_price_history"},
     "price_bases[0].hourly_usd_per_node: must be > 0"),
    ({"basis": "spot", "hourly_usd_per_node": None, "price_source": "spot_price_history"},
     "price_bases[0].hourly_usd_per_node: must not be null"),
    ({"basis": "spot", "hourly_usd_per_node": 1.0, "price_source": "spot_price_history",
      "retrieved_on": None, "region": None, "discount": 0.1}, "unknown key 'discount'"),
])
def test_a_bad_price_basis_names_the_key(tmp_path, entry, message):
    entry = {"retrieved_on": None, "region": None} | entry
    b = clean_run()
    m = b.build_manifest()
    m["price_bases"] = [entry]
    with pytest.raises(mf.ManifestError, match=message.replace("[", r"\[").replace("]", r"\]")):
        mf.validate(m)


def test_a_basis_given_twice_is_refused():
    m = clean_run().build_manifest()
    m["price_bases"] = _bases()[:1] * 2
    with pytest.raises(mf.ManifestError, match="'on_demand' given twice"):
        mf.validate(m)
