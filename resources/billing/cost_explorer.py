"""The bill of one run from Cost Explorer (`ce:GetCostAndUsage`), normalized to contract §2.4.

HOURLY granularity (Cost Explorer keeps hourly data for 14 days and only when hourly
granularity is enabled in Cost Management preferences); when hourly data is not
available the fetch falls back to DAILY and says so in the table's metadata
(`servingbench.granularity`, `servingbench.note`) and the log. Filtered by the run's
cost-allocation tag, the region, the account and the instance type (plus
`NoInstanceType`, so the run's tagged EBS volumes come too); grouped by usage type and
instance type. Pages are followed by hand (`NextPageToken`). Every request costs
$0.01: each is counted and logged, retries included. `Estimated` is kept per row.
A bill fetched before the usage appears is returned as it is (short); the coverage
gate rejects it and `bill_refresh_job` fetches it again later; nothing is filled in.

`CostExplorerBill` is the eks profile's bill source over it: the run's bill over its life
on the cluster, from `phases.provision.started_at` (or the earliest phase) to the last
phase's end plus `tail_s` (teardown finishes after the steady phase; rows outside the
steady window never enter the cost).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from servingbench.resources.aws.caller import AwsCallError, Caller, make_client
from servingbench.resources.billing.interface import BillSource
from servingbench.resources.billing.normalize import RUN_TAG, rows_from_cost_explorer, to_table
from servingbench.resources.billing.price_bases import PriceBasesLookup
from servingbench.resources.contract import manifest as mf

log = logging.getLogger("servingbench.billing")

USD_PER_REQUEST = 0.01
HOURLY_RETENTION_NS = 14 * 24 * 3600 * 10**9
NS_HOUR, NS_DAY = 3600 * 10**9, 24 * 3600 * 10**9
# Cost Explorer's answers when hourly data is off or out of range.
HOURLY_UNAVAILABLE = ("DataUnavailableException", "ValidationException")


@dataclass
class FetchReport:
    """What the last fetch did: granularity, pages and requests (each $0.01)."""

    granularity: str
    pages: int
    api_calls: int
    note: str | None

    @property
    def cost_usd(self) -> float:
        return round(self.api_calls * USD_PER_REQUEST, 2)


def _floor(ns: int, unit: int) -> int:
    return ns - ns % unit


def _ceil(ns: int, unit: int) -> int:
    return -(-ns // unit) * unit


def _fmt(ns: int, granularity: str) -> str:
    dt = datetime.fromtimestamp(ns // 10**9, UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ" if granularity == "HOURLY" else "%Y-%m-%d")


class CostExplorerApi:
    """Fetches a run's bill from Cost Explorer (the `ce` endpoint lives in us-east-1)."""

    def __init__(self, session: Any, *, endpoint_url: str | None = None,
                 caller: Caller | None = None, max_pages: int = 50,
                 clock: Callable[[], int] = time.time_ns):
        self.call = caller or Caller()
        self.ce = make_client(session, "ce", "us-east-1", endpoint_url)
        self.sts = make_client(session, "sts", "us-east-1", endpoint_url)
        self.max_pages, self.clock = max_pages, clock
        self.last_fetch: FetchReport | None = None

    def __repr__(self) -> str:
        return "CostExplorerApi()"

    def fetch_bill(self, run_id: str, instance_type: str, region: str, start_ns: int,
                   end_ns: int, *, account_id: str | None = None,
                   granularity: str = "HOURLY") -> pa.Table:
        """The bill rows of `run_id` over [start_ns, end_ns), in exactly `BILL`."""
        if end_ns <= start_ns:
            raise ValueError(f"empty billing window: start {start_ns} >= end {end_ns}")
        if granularity not in ("HOURLY", "DAILY"):
            raise ValueError(f"granularity must be HOURLY or DAILY, got {granularity!r}")
        if account_id is None:
            account_id = self.call(self.sts, "get_caller_identity")["Account"]
        calls_before = self.call.total("ce:GetCostAndUsage")
        note = None
        if granularity == "HOURLY" and self.clock() - start_ns > HOURLY_RETENTION_NS:
            granularity, note = "DAILY", "HOURLY unavailable: window older than 14 days; DAILY used"
        try:
            results, pages = self._query(run_id, instance_type, region, account_id,
                                         start_ns, end_ns, granularity)
        except AwsCallError as exc:
            if granularity != "HOURLY" or exc.code not in HOURLY_UNAVAILABLE:
                raise
            note = f"HOURLY unavailable ({exc}); DAILY used"
            log.warning("cost explorer: %s", note)
            granularity = "DAILY"
            results, pages = self._query(run_id, instance_type, region, account_id,
                                         start_ns, end_ns, granularity)
        calls = self.call.total("ce:GetCostAndUsage") - calls_before
        self.last_fetch = FetchReport(granularity, pages, calls, note)
        log.info("cost explorer: run %s, %s, %d page(s), %d request(s) = $%.2f",
                 run_id, granularity, pages, calls, self.last_fetch.cost_usd)
        rows = rows_from_cost_explorer(results, run_id=run_id, account_id=account_id,
                                       region=region)
        meta = {"granularity": granularity, "api_calls": str(calls),
                "api_cost_usd": f"{self.last_fetch.cost_usd:.2f}"}
        if note:
            meta["note"] = note
        return to_table(rows, meta)

    def _query(self, run_id: str, instance_type: str, region: str, account_id: str,
               start_ns: int, end_ns: int, granularity: str) -> tuple[list[dict], int]:
        unit = NS_HOUR if granularity == "HOURLY" else NS_DAY
        params = {
            "TimePeriod": {"Start": _fmt(_floor(start_ns, unit), granularity),
                           "End": _fmt(_ceil(end_ns, unit), granularity)},
            "Granularity": granularity,
            "Metrics": ["UnblendedCost", "UsageQuantity"],
            "GroupBy": [{"Type": "DIMENSION", "Key": "USAGE_TYPE"},
                        {"Type": "DIMENSION", "Key": "INSTANCE_TYPE"}],
            "Filter": {"And": [
                {"Tags": {"Key": RUN_TAG, "Values": [run_id], "MatchOptions": ["EQUALS"]}},
                {"Dimensions": {"Key": "REGION", "Values": [region]}},
                {"Dimensions": {"Key": "LINKED_ACCOUNT", "Values": [account_id]}},
                {"Dimensions": {"Key": "INSTANCE_TYPE",
                                "Values": [instance_type, "NoInstanceType"]}},
            ]},
        }
        results: list[dict] = []
        token: str | None = None
        for page in range(1, self.max_pages + 1):
            answer = self.call(self.ce, "get_cost_and_usage", **params,
                               **({"NextPageToken": token} if token else {}))
            results += answer.get("ResultsByTime", [])
            token = answer.get("NextPageToken")
            if not token:
                return results, page
        raise AwsCallError(f"cost explorer: more than {self.max_pages} pages; stopped "
                           f"(raise max_pages if this run really has that many line items)")


class RefreshError(ValueError):
    """The run folder cannot be billed (names the file and the missing key)."""


TAIL_S = 3600


def billing_window(manifest: dict, tail_s: int = TAIL_S) -> tuple[int, int]:
    spans = [(mf.parse_ts(s["started_at"]), mf.parse_ts(s["ended_at"]))
             for s in manifest["phases"].values() if s["started_at"] and s["ended_at"]]
    if not spans:
        raise RefreshError("manifest.json: phases has no started_at/ended_at: no billing window")
    start = (mf.parse_ts(p["started_at"]) if (p := manifest["phases"].get("provision"))
             and p["started_at"] else min(a for a, _ in spans))
    return start, max(b for _, b in spans) + tail_s * 10**9


class CostExplorerBill(BillSource):
    """The run's Cost Explorer bill over its life on the cluster (see billing_window)."""

    source = "cost_explorer"

    def __init__(self, billing: CostExplorerApi, price_bases: PriceBasesLookup | None = None):
        self.billing = billing
        self.lookup = price_bases

    @classmethod
    def from_aws(cls, aws) -> CostExplorerBill:
        if aws is None:
            raise ValueError("bill source 'cost_explorer' reads AWS Cost Explorer: it needs "
                             "the eks profile's AWS session")
        return cls(CostExplorerApi(aws.session, endpoint_url=aws.endpoint_url, caller=aws.caller),
                   PriceBasesLookup.from_session(aws.session, endpoint_url=aws.endpoint_url,
                                                 caller=aws.caller))

    def price_bases(self, manifest: dict) -> list[dict] | None:
        return None if self.lookup is None else self.lookup.lookup(manifest)

    def fetch_bill(self, manifest: dict) -> pa.Table:
        start, end = billing_window(manifest)
        return self.billing.fetch_bill(manifest["run_id"], manifest["instance_type"],
                                       manifest["region"], start, end,
                                       account_id=manifest["account_id"])


PLUGIN = CostExplorerBill  # what this file adds to the billing package
