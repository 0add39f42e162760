"""Cost Explorer results and price-list quotes → the bill of contract §2.4, exactly `BILL`.

One row per period × line item. Amounts come from the API's decimal strings; nothing
is filled in: a group without a cost metric is an error, an unknown service is null.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

import pyarrow as pa
from servingbench.resources.contract.schemas import BILL

RUN_TAG = "servingbench:run-id"
NS_PER_HOUR = 3600 * 10**9

# Service of a usage type, by the usage-type family AWS documents. Unknown → null.
_SERVICE_BY_FAMILY = (
    ("BoxUsage", "Amazon Elastic Compute Cloud - Compute"),
    ("SpotUsage", "Amazon Elastic Compute Cloud - Compute"),
    ("DedicatedUsage", "Amazon Elastic Compute Cloud - Compute"),
    ("HostBoxUsage", "Amazon Elastic Compute Cloud - Compute"),
    ("ReservedHostUsage", "Amazon Elastic Compute Cloud - Compute"),
    ("AmazonEKS-Hours", "Amazon Elastic Container Service for Kubernetes"),
    ("EBS:", "EC2 - Other"),
    ("DataTransfer-", "EC2 - Other"),
    ("NatGateway-", "EC2 - Other"),
    ("PublicIPv4:", "Amazon Virtual Private Cloud"),
)


class BillError(ValueError):
    """A billing API answer that cannot be normalized; names the period and group."""


def service_of(usage_type: str | None) -> str | None:
    if not usage_type:
        return None
    for family, service in _SERVICE_BY_FAMILY:
        if family in usage_type:
            return service
    return None


def parse_period(text: str) -> int:
    """`2026-11-29` or `2026-11-29T02:00:00Z` (Cost Explorer's two forms) → ns UTC."""
    try:
        if "T" in text:
            dt = datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")
        else:
            dt = datetime.strptime(text, "%Y-%m-%d")
    except (TypeError, ValueError):
        raise BillError(f"bad TimePeriod boundary {text!r}") from None
    return int(dt.replace(tzinfo=UTC).timestamp()) * 10**9


def _amount(metrics: dict, name: str, where: str) -> tuple[float, str | None]:
    entry = metrics.get(name)
    if entry is None:
        raise BillError(f"{where}: metric {name!r} missing from the answer")
    try:
        return float(entry["Amount"]), entry.get("Unit")
    except (KeyError, TypeError, ValueError):
        raise BillError(f"{where}: metric {name!r} has no numeric Amount: {entry!r}") from None


def rows_from_cost_explorer(results_by_time: Iterable[dict], *, run_id: str, account_id: str,
                            region: str, metric: str = "UnblendedCost",
                            group_keys: tuple[str, str] = ("usage_type", "instance_type"),
                            ) -> list[dict]:
    """Rows of a `get_cost_and_usage` answer grouped by USAGE_TYPE and INSTANCE_TYPE."""
    rows: list[dict] = []
    for result in results_by_time:
        period = result.get("TimePeriod") or {}
        start, end = parse_period(period.get("Start")), parse_period(period.get("End"))
        estimated = bool(result.get("Estimated", False))
        for group in result.get("Groups", []):
            keys = dict(zip(group_keys, group.get("Keys", []), strict=False))
            where = f"period {period.get('Start')} group {group.get('Keys')}"
            amount, unit = _amount(group.get("Metrics", {}), metric, where)
            quantity, usage_unit = _amount(group.get("Metrics", {}), "UsageQuantity", where)
            rows.append({
                "run_id": run_id, "period_start": start, "period_end": end,
                "account_id": account_id, "region": region,
                "service": service_of(keys.get("usage_type")),
                "usage_type": keys.get("usage_type"), "instance_type": keys.get("instance_type"),
                "tag_key": RUN_TAG, "tag_value": run_id, "metric": metric,
                "amount": amount, "unit": unit, "usage_quantity": quantity,
                "usage_unit": usage_unit, "estimated": estimated, "source": "cost_explorer",
            })
    return rows


def price_list_rows(*, run_id: str, account_id: str | None, region: str, instance_type: str,
                    node_count: int, start_ns: int, end_ns: int, usd_per_hour: float,
                    usage_type: str | None, service: str | None) -> list[dict]:
    """Hourly rows for `node_count` nodes running over [start_ns, end_ns) at list price.

    Periods are clock hours, like Cost Explorer's HOURLY; each row's usage is
    `node_count × overlap hours` and its amount `usage × usd_per_hour`.
    """
    if end_ns <= start_ns:
        raise BillError(f"empty window: start {start_ns} >= end {end_ns}")
    rows: list[dict] = []
    period = start_ns - start_ns % NS_PER_HOUR
    while period < end_ns:
        nxt = period + NS_PER_HOUR
        overlap_ns = min(nxt, end_ns) - max(period, start_ns)
        quantity = node_count * overlap_ns / NS_PER_HOUR
        rows.append({
            "run_id": run_id, "period_start": period, "period_end": nxt,
            "account_id": account_id, "region": region, "service": service,
            "usage_type": usage_type, "instance_type": instance_type,
            "tag_key": RUN_TAG, "tag_value": run_id, "metric": "UnblendedCost",
            "amount": quantity * usd_per_hour, "unit": "USD", "usage_quantity": quantity,
            "usage_unit": "Hrs", "estimated": False, "source": "price_list",
        })
        period = nxt
    return rows


def to_table(rows: list[dict], metadata: dict[str, str] | None = None) -> pa.Table:
    """Rows → a table in exactly `BILL` (timestamps as ns UTC), with optional notes."""
    columns = {name: [row[name] for row in rows] for name in BILL.names}
    table = pa.Table.from_pydict(columns, schema=BILL)
    if metadata:
        table = table.replace_schema_metadata({f"servingbench.{k}": v for k, v in metadata.items()})
    return table
