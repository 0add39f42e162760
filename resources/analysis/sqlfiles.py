"""Named queries from `sql/`: one query per file, values only through `$` bind parameters.

`sql/` (the package `servingbench.sql`) is package data read through importlib.resources, so
the queries are found the same way from a source tree and from an installed wheel."""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

import duckdb
import pyarrow as pa

SQL_DIR = files("servingbench.sql")
_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


@cache
def load(name: str) -> str:
    """The text of `sql/<name>.sql`; its header must name it."""
    text = (SQL_DIR / f"{name}.sql").read_text(encoding="utf-8")
    if f"-- name: {name}\n" not in text:
        raise ValueError(f"sql/{name}.sql: header '-- name: {name}' missing")
    return text


def params_of(name: str) -> set[str]:
    """The `$params` a query binds (comment lines excluded)."""
    body = "\n".join(line for line in load(name).splitlines() if not line.lstrip().startswith("--"))
    return set(_PARAM.findall(body))


def query(con: duckdb.DuckDBPyConnection, name: str, **params) -> pa.Table:
    """Run the named query with exactly the parameters it uses; return an Arrow table."""
    wanted = params_of(name)
    missing = wanted - params.keys()
    if missing:
        raise TypeError(f"sql/{name}.sql needs parameters {sorted(missing)}")
    bound = {k: v for k, v in params.items() if k in wanted}
    return con.sql(load(name), params=bound or None).to_arrow_table()


def create(con: duckdb.DuckDBPyConnection, name: str, table: str | None = None,
           view: bool = False) -> None:
    """Store the named query (one without parameters) as the table `table` (default: its
    name), or as a view: a view is its query, run again by each query that reads it. The
    view is temporary (this connection's): it may read what was registered from Python (a
    partial stream, an Arrow dataset), which a view in the database file may not."""
    if view:
        con.execute(f'CREATE OR REPLACE TEMPORARY VIEW "{table or name}" AS {load(name)}')
    else:
        con.sql(load(name)).create(table or name)
