"""The DuckDB file holds `frontier` and `cost_what_if` per run (a run's rows replaced when it
is published again) and `frontier_levels` across runs, replaced whole (real DuckDB)."""

from __future__ import annotations

import duckdb
import pytest
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.analysis.frontier import levels_of_folders
from servingbench.resources.storage.store import Storage

from tests.support.runbuilder import clean_run

MANIFEST = {"candidate": "p5-scout-bf16-tp8", "instance_type": "p5.48xlarge",
            "source": "emulated", "created_at": "2026-11-29T02:00:00.000000000Z"}
SPOT = {"basis": "spot", "hourly_usd_per_node": 21.0, "price_source": "spot_price_history",
        "retrieved_on": "2026-11-28", "region": "us-east-1"}


def _rows(store: Storage, sql: str) -> list[tuple]:
    con = duckdb.connect(str(store.duckdb_path), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_frontier_what_if_and_levels_tables(tmp_path):
    b = clean_run()
    b.manifest["price_bases"] = [SPOT]
    run = b.write(tmp_path / "runs" / "run-1")
    result = analyze_run(run)
    store = Storage(tmp_path)
    tables = {"frontier": result.frontier, "cost_what_if": result.what_if}
    store.publish("run-1", "p", MANIFEST, tables)
    store.publish("run-1", "p", MANIFEST, tables)  # again: replaced, not doubled
    assert _rows(store, "SELECT run_id, step, on_frontier FROM frontier") == [
        ("run-1", "c=2", True)]
    assert _rows(store, "SELECT basis, round(cost_per_1m_output_usd, 6) FROM cost_what_if") == [
        ("spot", round(21.0 * 0.4 / 3600 / 9 * 1e6, 6))]
    levels = levels_of_folders([run], 2.0, [10, 30])
    store.replace_levels(levels)
    store.replace_levels(levels)
    # clean_run's interactivity is 25 tok/s: it reaches 10, not 30
    assert _rows(store, "SELECT level_tok_s, step, rank FROM frontier_levels ORDER BY 1") == [
        (10.0, "c=2", 1), (30.0, None, None)]
    store.replace_levels(levels.slice(0, 0).cast(levels.schema))
    assert _rows(store, "SELECT count(*) FROM frontier_levels") == [(0,)]


def test_levels_skip_a_broken_folder_when_asked(tmp_path):
    good = clean_run().write(tmp_path / "good")
    analyze_run(good)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text("{not json")
    assert levels_of_folders([good, broken], 2.0, [10], skip_broken=True).num_rows == 1
    with pytest.raises(ValueError, match="manifest.json"):
        levels_of_folders([good, broken], 2.0, [10])
