"""The embedded default's bill: the price sheet's hourly rate over the steady phase."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from servingbench.resources.billing.interface import BillSource
from servingbench.resources.contract.schemas import BILL
from servingbench.resources.contract.timestamps import parse_ts


class PriceSheetBill(BillSource):
    """The embedded default: one `Hrs` row for the steady phase at the price sheet's hourly
    rate × node_count (source = price_sheet). Nothing was billed by anyone: like every other
    output of the local path, the cost it gives is emulated."""

    source = "price_sheet"
    # it reads the run's events.parquet (assets/bill.py passes the run folder)
    reads_run_dir = True

    def fetch_bill(self, manifest: dict, run_dir: Path | None = None) -> pa.Table:
        basis = manifest.get("price_basis") or {}
        price = basis.get("hourly_usd_per_node")
        steady = manifest["phases"].get("steady")
        if price is None:
            raise ValueError(f"the price sheet has no hourly price for {manifest['instance_type']}")
        if not steady or not steady.get("ended_at"):
            raise ValueError("the run has no finished steady phase to bill")
        start, end = parse_ts(steady["started_at"]), parse_ts(steady["ended_at"])
        hours = (end - start) / 3.6e12
        n = manifest["node_count"]
        node_hours = None if run_dir is None else _node_hours(Path(run_dir), manifest, start, end)
        usage = n * hours if node_hours is None else node_hours
        spot = (manifest.get("capacity") == "spot"
                or (manifest.get("price_basis") or {}).get("purchase_option") == "spot")
        row = {"run_id": manifest["run_id"], "period_start": start, "period_end": end,
               "account_id": manifest["account_id"], "region": manifest["region"],
               "service": "price sheet (embedded default)",
               "usage_type": f"{'SpotUsage' if spot else 'BoxUsage'}:{manifest['instance_type']}",
               "instance_type": manifest["instance_type"], "tag_key": "servingbench:run-id",
               "tag_value": manifest["run_id"], "metric": "UnblendedCost",
               "amount": price * usage, "unit": "USD", "usage_quantity": usage,
               "usage_unit": "Hrs", "estimated": False, "source": self.source}
        return pa.Table.from_pylist([row], schema=BILL)


def _node_hours(run_dir: Path, manifest: dict, start: int, end: int) -> float | None:
    """Node-hours inside [start, end) from the run's node events (contract §2.6), each node
    counted from its `node_requested` (EC2 bills from launch) to its first `node_gone` or
    `interruption`, by the analysis's timeline (one definition, in SQL); None when the run
    has no node event (every node up the whole phase)."""
    from servingbench.resources.analysis.billed_nodes import billed_node_hours

    return billed_node_hours(run_dir, manifest["run_id"], start, end)


PLUGIN = PriceSheetBill  # what this file adds to the billing package
