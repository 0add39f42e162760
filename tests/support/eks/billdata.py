"""A hand-computed run and its Cost Explorer answer, shared by the billing tests.

One p5.48xlarge node (list price $55.04/h) runs 02:10:00 → 03:15:00 UTC:
  02:00–03:00  BoxUsage 50/60 h = 0.8333333333 h × 55.04 = $45.8666666667
               EBS gp3 volume   0.0342 USD (GB-Mo, not hourly)
  03:00–04:00  BoxUsage 15/60 h = 0.25 h × 55.04 = $13.76
"""

from __future__ import annotations

from servingbench.resources.contract.timestamps import parse_ts

RUN_ID = "20261129T020000Z-p5.48xlarge-scout-bf16-7f3a"
ACCOUNT = "123456789012"
INSTANCE = "p5.48xlarge"
NODES_UP = parse_ts("2026-11-29T02:10:00Z")
NODES_DOWN = parse_ts("2026-11-29T03:15:00Z")
NOW = parse_ts("2026-11-29T12:00:00Z")
PRICE = 55.04


def group(usage_type, instance_type, cost, qty, qty_unit):
    return {"Keys": [usage_type, instance_type], "Metrics": {
        "UnblendedCost": {"Amount": cost, "Unit": "USD"},
        "UsageQuantity": {"Amount": qty, "Unit": qty_unit}}}


def period(start, end, groups, estimated=True):
    return {"TimePeriod": {"Start": start, "End": end}, "Total": {}, "Groups": groups,
            "Estimated": estimated}


H02, H03, H04 = "2026-11-29T02:00:00Z", "2026-11-29T03:00:00Z", "2026-11-29T04:00:00Z"
PAGES = [
    {"ResultsByTime": [period(H02, H03, [group("BoxUsage:p5.48xlarge", INSTANCE,
                                              "45.8666666667", "0.8333333333", "Hrs")])],
     "DimensionValueAttributes": [], "NextPageToken": "page-2"},
    {"ResultsByTime": [period(H02, H03, [group("EBS:VolumeUsage.gp3", "NoInstanceType",
                                              "0.0342", "0.6849315068", "GB-Mo")])],
     "DimensionValueAttributes": [], "NextPageToken": "page-3"},
    {"ResultsByTime": [period(H03, H04, [group("BoxUsage:p5.48xlarge", INSTANCE,
                                              "13.76", "0.25", "Hrs")], estimated=False)],
     "DimensionValueAttributes": []},
]
