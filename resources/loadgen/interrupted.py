"""Which cut requests a spot interruption cut (contract §3.8): a request whose connection
died (`disconnect`), or that the balancer answered 502 for a replica that died before its
first byte, at or after an `interruption_notice` for the node of the replica that
served it (the balancer's `X-Servingbench-Replica` header, the request log's `replica`) gets
the error `spot_interruption`; `--retry-interrupted` then sends it again as a new request
whose `retry_of` is its id.

The notices are read from the run folder's events.parquet (contract §2.6), which the run
writes whole after every event: a replica's node is the `detail` of its
`replica_requested` or `replica_ready`. The file is read again only when it changed.

A request whose replica is unknown (on EKS the Service names no pod) is a cut one when it
died between some node's notice and 30 s after that node went (contract §3.8's window for
`lost`): the analyzer then counts exactly these as lost."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
from servingbench.resources.contract import run_files
from servingbench.resources.contract.schemas import SchemaError

CUT = "spot_interruption"
MAX_RESENDS = 8  # a resend that is cut again is resent again, this many times at most
AFTER_NS = 30 * 10**9  # past the node's going, a death still counts as its (contract §3.8)


def may_be_cut(status: str, http_status: int | None) -> bool:
    """Whether a request ended the way an interruption ends one: its connection died
    mid-answer (`disconnect`), or the balancer answered 502 itself because the replica died
    before its first byte (llama.cpp sends its head with the first token)."""
    return status == "disconnect" or (status == "http_error" and http_status == 502)


class Notices:
    def __init__(self, run_dir: Path | None) -> None:
        self.path = None if run_dir is None else Path(run_dir) / run_files.EVENTS_FILE
        self._stamp: tuple[int, int] | None = None
        self._node: dict[str, str] = {}           # replica -> node
        self._notice: dict[str, int] = {}         # node -> its first notice (UTC ns)
        self._gone: dict[str, int] = {}           # node -> its interruption (UTC ns)

    def _refresh(self) -> None:
        try:
            st = os.stat(self.path)
        except (OSError, TypeError):
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        try:
            table = run_files.read_events(self.path.parent)
        except (OSError, pa.ArrowException, SchemaError):
            return  # being replaced this instant: the next cut reads it again
        rows = [] if table is None else table.select(
            ["at", "kind", "subject", "detail"]).to_pylist()
        self._stamp = stamp
        for r in rows:
            if r["kind"] in ("replica_requested", "replica_ready") and r["detail"]:
                self._node.setdefault(r["subject"], r["detail"])
            elif r["kind"] in ("interruption_notice", "interruption"):
                seen = self._notice if r["kind"] == "interruption_notice" else self._gone
                at = r["at"].value
                seen[r["subject"]] = min(at, seen.get(r["subject"], at))

    def cut(self, replica: str | None, finished_utc_ns: int) -> bool:
        """Whether a request of `replica` that died at `finished_utc_ns` died after a
        notice for its node (`replica` None: in the window of any node's notice)."""
        if self.path is None:
            return False
        self._refresh()
        if replica is None:
            return any(at <= finished_utc_ns and (node not in self._gone
                                                  or finished_utc_ns <= self._gone[node] + AFTER_NS)
                       for node, at in self._notice.items())
        node = self._node.get(replica)
        notice = None if node is None else self._notice.get(node)
        return notice is not None and notice <= finished_utc_ns
