"""The node-hours a run's nodes were billed for over a window, from its events (contract
§2.6) by the timeline's SQL (sql/timeline.sql `node_billed`, sql/billed_node_hours.sql): the
price sheet's bill counts nodes the way the cost's node integral and rule 5 do, with no
timeline of its own."""

from __future__ import annotations

import shutil
from pathlib import Path

from servingbench.resources.analysis import sqlfiles
from servingbench.resources.analysis.rundir import connect
from servingbench.resources.contract import run_files


def billed_node_hours(run_dir: Path, run_id: str, start_ns: int, end_ns: int) -> float | None:
    """Node-hours inside [start_ns, end_ns); None when the run has no node event."""
    events = run_files.read_events(run_dir, run_id)
    if events is None or events.num_rows == 0:
        return None
    con, scratch = connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.register("events_in", events)
        con.execute('CREATE TABLE events AS SELECT * FROM events_in ORDER BY "at"')
        con.sql(sqlfiles.load("timeline")).create("timeline")
        [hours] = sqlfiles.query(con, "billed_node_hours", start_ns=start_ns,
                                 end_ns=end_ns).column("node_hours").to_pylist()
        return hours
    finally:
        con.close()
        shutil.rmtree(scratch, ignore_errors=True)
