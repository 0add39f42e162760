"""(Re)fetch the Cost Explorer bill of a run folder: the core of `bill_refresh_job`, and
the eks profile's `CostExplorerBill` (the same window, fetched when the run ends).

The window is the run's life on the cluster: from `phases.provision.started_at` (or the
earliest phase) to the last phase's end plus `tail_s` (teardown finishes after the
steady phase; rows outside the steady window never enter the cost). The new bill
replaces `bill.parquet` atomically; it is never merged with or filled from an old one.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from resources.billing.cost_explorer import CostExplorerApi, FetchReport
from resources.billing.interface import BillSource
from resources.billing.price_bases import PriceBasesLookup
from resources.contract import manifest as mf
from resources.contract.schemas import write_parquet

TAIL_S = 3600


class RefreshError(ValueError):
    """The run folder cannot be billed (names the file and the missing key)."""


def billing_window(manifest: dict, tail_s: int = TAIL_S) -> tuple[int, int]:
    spans = [(mf.parse_ts(s["started_at"]), mf.parse_ts(s["ended_at"]))
             for s in manifest["phases"].values() if s["started_at"] and s["ended_at"]]
    if not spans:
        raise RefreshError("manifest.json: phases has no started_at/ended_at: no billing window")
    start = (mf.parse_ts(p["started_at"]) if (p := manifest["phases"].get("provision"))
             and p["started_at"] else min(a for a, _ in spans))
    return start, max(b for _, b in spans) + tail_s * 10**9


def refresh_bill(run_dir: Path, billing: CostExplorerApi) -> FetchReport:
    """Fetch the run's bill and write `run_dir/bill.parquet`; returns what the fetch did."""
    run_dir = Path(run_dir)
    m = mf.load(run_dir / "manifest.json")
    for key in ("instance_type", "region", "account_id"):
        if not m[key]:
            raise RefreshError(f"{run_dir / 'manifest.json'}: {key} is null; cannot scope the bill")
    if m["source"] != "measured":
        raise RefreshError(f"{run_dir / 'manifest.json'}: source is {m['source']!r}; "
                           f"only measured runs have a Cost Explorer bill")
    start, end = billing_window(m)
    bill = billing.fetch_bill(m["run_id"], m["instance_type"], m["region"], start, end,
                              account_id=m["account_id"])
    write_parquet(bill, run_dir / "bill.parquet")
    return billing.last_fetch


class CostExplorerBill(BillSource):
    """The run's Cost Explorer bill over its life on the cluster (see billing.refresh)."""

    source = "cost_explorer"

    def __init__(self, billing: CostExplorerApi, price_bases: PriceBasesLookup | None = None):
        self.billing = billing
        self.lookup = price_bases

    def price_bases(self, manifest: dict) -> list[dict] | None:
        return None if self.lookup is None else self.lookup.lookup(manifest)

    def fetch_bill(self, manifest: dict) -> pa.Table:
        start, end = billing_window(manifest)
        return self.billing.fetch_bill(manifest["run_id"], manifest["instance_type"],
                                       manifest["region"], start, end,
                                       account_id=manifest["account_id"])
