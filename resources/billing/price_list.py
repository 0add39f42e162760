"""A cross-check bill from the AWS Price List (`pricing:GetProducts`): on-demand Linux,
shared tenancy, × node-hours. `source = price_list`; never mixed with a Cost Explorer
bill (gate 6), only compared with it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from servingbench.resources.aws.caller import Caller, make_client
from servingbench.resources.billing.normalize import BillError, price_list_rows, to_table

log = logging.getLogger("servingbench.billing")

PRICING_REGION = "us-east-1"  # the Price List API answers from us-east-1 (and ap-south-1)


@dataclass(frozen=True)
class PriceQuote:
    """One on-demand hourly price, with where it came from."""

    instance_type: str
    region: str
    usd_per_hour: float
    sku: str
    usage_type: str | None
    service: str | None
    effective_date: str | None


def _filters(instance_type: str, region: str) -> list[dict]:
    terms = {
        "instanceType": instance_type, "regionCode": region, "operatingSystem": "Linux",
        "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used",
        "licenseModel": "No License required",
    }
    return [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in terms.items()]


def on_demand_hourly(product: dict) -> tuple[float, str | None]:
    for term in product.get("terms", {}).get("OnDemand", {}).values():
        for dim in term.get("priceDimensions", {}).values():
            if dim.get("unit") == "Hrs" and "USD" in dim.get("pricePerUnit", {}):
                return float(dim["pricePerUnit"]["USD"]), term.get("effectiveDate")
    raise BillError(f"price list product {product.get('product', {}).get('sku')}: "
                    f"no on-demand hourly USD price")


class PriceListApi:
    """Prices node-hours from the Price List. `pricing_client` is a boto3 `pricing`
    client (or a fake with the same `get_products`)."""

    def __init__(self, pricing_client: Any, *, caller: Caller | None = None):
        self.pricing = pricing_client
        self.call = caller or Caller()

    @classmethod
    def from_session(cls, session: Any, *, endpoint_url: str | None = None,
                     caller: Caller | None = None) -> PriceListApi:
        return cls(make_client(session, "pricing", PRICING_REGION, endpoint_url), caller=caller)

    def product(self, instance_type: str, region: str) -> dict:
        """The one Linux shared-tenancy EC2 product of `instance_type` in `region`, with
        its terms (on-demand and reserved)."""
        products: list[dict] = []
        token: str | None = None
        while True:
            page = self.call(self.pricing, "get_products", ServiceCode="AmazonEC2",
                             Filters=_filters(instance_type, region), FormatVersion="aws_v1",
                             MaxResults=100, **({"NextToken": token} if token else {}))
            products += [json.loads(p) if isinstance(p, str) else p
                         for p in page.get("PriceList", [])]
            token = page.get("NextToken")
            if not token:
                break
        if not products:
            raise BillError(f"price list: no on-demand Linux shared-tenancy product for "
                            f"{instance_type} in {region}")
        skus = sorted(p.get("product", {}).get("sku", "?") for p in products)
        if len(products) > 1:
            raise BillError(f"price list: {len(products)} products match {instance_type} in "
                            f"{region} (SKUs {', '.join(skus)}); expected one")
        return products[0]

    def quote(self, instance_type: str, region: str) -> PriceQuote:
        """The on-demand Linux shared-tenancy hourly price of one node."""
        product = self.product(instance_type, region)
        sku = product.get("product", {}).get("sku", "?")
        attrs = product.get("product", {}).get("attributes", {})
        usd, effective = on_demand_hourly(product)
        log.info("price list: %s in %s = $%.4f/h (sku %s)", instance_type, region, usd, sku)
        return PriceQuote(instance_type, region, usd, sku, attrs.get("usagetype"),
                          attrs.get("servicename"), effective)

    def fetch_bill(self, run_id: str, instance_type: str, region: str, node_count: int,
                   start_ns: int, end_ns: int, *, account_id: str | None = None) -> pa.Table:
        """Hourly bill rows for `node_count` nodes over [start_ns, end_ns), in `BILL`."""
        q = self.quote(instance_type, region)
        rows = price_list_rows(run_id=run_id, account_id=account_id, region=region,
                               instance_type=instance_type, node_count=node_count,
                               start_ns=start_ns, end_ns=end_ns, usd_per_hour=q.usd_per_hour,
                               usage_type=q.usage_type, service=q.service)
        return to_table(rows, {"granularity": "HOURLY", "sku": q.sku,
                               "effective_date": q.effective_date or "",
                               "usd_per_hour": repr(q.usd_per_hour)})
