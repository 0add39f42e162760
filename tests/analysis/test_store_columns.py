"""The DuckDB file across versions: a table created by an older analyzer (without the
headline's optional SLO-search columns) takes a newer run's rows, and the old rows read the
new columns as null (real DuckDB)."""

from __future__ import annotations

import duckdb
import pyarrow as pa
from servingbench.resources.storage.store import Storage

OLD = {"run_id": ["old"], "candidate": ["a"], "meets_slo": [True], "step": ["c=1"],
       "cost_per_1m_output_usd": [1.5]}
NEW = {"run_id": ["new"], "candidate": ["b"], "meets_slo": [True], "step": ["rate=3"],
       "cost_per_1m_output_usd": [2.5], "slo_search_capacity": [3.0],
       "slo_search_step": ["rate=3"], "slo_search_cost_per_1m_output_usd": [2.5]}
MANIFEST = {"candidate": "a", "instance_type": "p5.48xlarge", "source": "emulated",
            "created_at": "2026-11-29T02:00:00.000000000Z"}


def test_an_old_headline_table_takes_the_new_columns(tmp_path):
    store = Storage(tmp_path)
    store.publish("old", "p", MANIFEST, {"headline": pa.table(OLD)})
    store.publish("new", "p", MANIFEST | {"candidate": "b"},
                  {"headline": pa.table({k: NEW[k] for k in reversed(list(NEW))})})
    # republishing an old-shape run replaces its rows and leaves the new columns null
    store.publish("old", "p", MANIFEST, {"headline": pa.table(OLD)})
    con = duckdb.connect(str(store.duckdb_path), read_only=True)
    got = con.execute("SELECT run_id, step, cost_per_1m_output_usd, slo_search_capacity, "
                      "slo_search_step, slo_search_cost_per_1m_output_usd FROM headline "
                      "ORDER BY run_id").fetchall()
    con.close()
    assert got == [("new", "rate=3", 2.5, 3.0, "rate=3", 2.5),
                   ("old", "c=1", 1.5, None, None, None)]
