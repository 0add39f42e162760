"""(Re)fetch the Cost Explorer bill of a run folder: the core of `bill_refresh_job` and
`servingbench eks bill`, over the same window as the eks profile's bill source
(cost_explorer.py `CostExplorerBill`, `billing_window`). The new bill replaces
`bill.parquet` atomically; it is never merged with or filled from an old one.
"""

from __future__ import annotations

from pathlib import Path

from servingbench.resources.billing.cost_explorer import (
    CostExplorerApi,
    FetchReport,
    RefreshError,
    billing_window,
)
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.schemas import write_parquet


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
