"""cost_explorer_bill: the bill of exactly the run's scope (contract §2.4), fetched after the
steady phase. The local profile's comes from the price sheet (source = price_sheet)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import dagster as dg
from servingbench.assets.partitions import run_value
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.schemas import write_parquet


def build(partitions_def) -> dg.AssetsDefinition:
    @dg.asset(partitions_def=partitions_def, group_name="benchmark",
              required_resource_keys={"bill_source"},
              description="The run's bill, normalized (contract §2.4). Rows stay `estimated` until "
                          "Cost Explorer closes the month; bill_refresh_job refetches them.")
    def cost_explorer_bill(context, steady_state_request_log: dict) -> dg.Output:
        run_dir = Path(steady_state_request_log["run_dir"])
        manifest = mf.load(run_dir / "manifest.json")
        source = context.resources.bill_source
        # the price sheet follows the run's node timeline (events.parquet) when it has one
        bill = (source.fetch_bill(manifest, run_dir) if getattr(source, "reads_run_dir", False)
                else source.fetch_bill(manifest))
        _record_price_bases(context.resources.bill_source, manifest, run_dir)
        write_parquet(bill, run_dir / "bill.parquet")
        rows = bill.to_pylist()
        return dg.Output(
            run_value(manifest["run_id"], run_dir, rows=len(rows)),
            metadata={
                "rows": dg.MetadataValue.int(len(rows)),
                "parquet": dg.MetadataValue.path(str(run_dir / "bill.parquet")),
                "sources": dg.MetadataValue.json(dict(Counter(r["source"] for r in rows))),
                "estimated_rows": dg.MetadataValue.int(sum(bool(r["estimated"]) for r in rows)),
                "total_usd": dg.MetadataValue.float(float(sum(r["amount"] or 0 for r in rows))),
            })

    return cost_explorer_bill


def _record_price_bases(bill_source, manifest: dict, run_dir: Path) -> None:
    """The what-if prices of the run's scope (contract §4.1), looked up once with the bill
    and kept in the manifest so that every later analysis prices the same; a refetch never
    replaces prices already looked up. Without a lookup the price sheet's stay."""
    current = manifest.get("price_bases") or []
    if any(b["price_source"] != "price_sheet" for b in current):
        return
    looked = bill_source.price_bases(manifest)
    if looked is None:
        return
    manifest["price_bases"] = looked
    mf.dump(manifest, run_dir / "manifest.json")
