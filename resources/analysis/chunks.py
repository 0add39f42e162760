"""The chunk-level relations that the gates, the metrics and the report share, built once
per connection from the views `steady` and `chunks`: `steady_req` (the steady requests
numbered), `chunk_gaps` (each chunk of a steady request with its gap to the one before it
and its per-token ITL), `chunk_facts` (in one pass over it: each request's chunk facts,
the view `chunk_req`, and the ITL's histogram per step and model).

`chunk_gaps` is read in the chunk log's own order (sql/chunk_gaps.sql, a view: a streaming
pass over the log), because every writer writes a request's chunks together in seq order;
`chunk_req` then says whether that held for every request (one chunk without a gap each).
When it did not, `chunk_gaps` is built again by seq (sql/chunk_gaps_by_seq.sql, a window
that sorts every chunk row, stored as a table): same rows, same values. Measured in
docs/performance.md ("Analyzer"): the sort was most of a night-sized run's analysis.
"""

from __future__ import annotations

import duckdb
from servingbench.resources.analysis import sqlfiles

IN_ORDER, BY_SEQ = "log order", "by seq"


def build(con: duckdb.DuckDBPyConnection) -> str:
    """Create steady_req, chunk_gaps and chunk_req on `con`; returns how chunk_gaps was read
    (IN_ORDER or BY_SEQ)."""
    con.execute(sqlfiles.load("itl_s"))
    sqlfiles.create(con, "steady_req")
    sqlfiles.create(con, "chunk_gaps", view=True)
    sqlfiles.create(con, "chunk_facts")
    sqlfiles.create(con, "chunk_req", view=True)
    [(unordered,)] = con.execute(
        "SELECT count(*) FROM chunk_req WHERE first_chunks <> 1").fetchall()
    if not unordered:
        return IN_ORDER
    con.execute("DROP TABLE chunk_facts")
    con.execute("DROP VIEW chunk_gaps")
    sqlfiles.create(con, "chunk_gaps_by_seq", table="chunk_gaps")
    sqlfiles.create(con, "chunk_facts")
    return BY_SEQ
