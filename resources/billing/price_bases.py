"""What-if price bases (contract §4.1), looked up once when a run is made and stored in its
manifest's `price_bases`, so the offline analyzer prices every step reproducibly:

* on-demand and reserved 1/3 yr: the AWS Price List (`pricing:GetProducts`), Linux shared
  tenancy; reserved is the standard offering class, No Upfront where offered (else Partial,
  else All Upfront), its upfront fee spread over the term's hours;
* savings plans 1/3 yr: Compute Savings Plans, No Upfront, from
  `savingsplans:DescribeSavingsPlansOfferingRates` (the Price List's savings-plan rates);
* spot: EC2 spot price history, the time-weighted mean over the 7 days before the run in
  the run's availability zone (interruptions are not modelled);
* Capacity Blocks: `ec2:DescribeCapacityBlockOfferings`, the lowest upfront fee per
  node-hour among the offerings for the run's node count.

A basis that cannot be looked up (no product, no offering, no permission) is left out and
logged: a what-if price is never invented.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Any

import botocore.exceptions
import botocore.parsers
from servingbench.resources.aws.caller import AwsCallError, Caller, make_client
from servingbench.resources.billing.normalize import BillError
from servingbench.resources.billing.price_list import PRICING_REGION, PriceListApi, on_demand_hourly

log = logging.getLogger("servingbench.billing")

HOURS_PER_YEAR = 8760
SPOT_DAYS = 7
PAYMENT_PREFERENCE = ("No Upfront", "Partial Upfront", "All Upfront")
SP_DURATION_S = {31_536_000: "savings_plan_1yr", 94_608_000: "savings_plan_3yr"}
CAPACITY_BLOCK_HOURS = 24  # the shortest block every Capacity Block instance type offers


def entry(basis: str, usd: float, price_source: str, retrieved_on: str, region: str) -> dict:
    """One manifest `price_bases` entry (contract §2.1)."""
    return {"basis": basis, "hourly_usd_per_node": float(usd), "price_source": price_source,
            "retrieved_on": retrieved_on, "region": region}


def reserved_hourly(product: dict, years: int) -> float | None:
    """Effective hourly price of a standard reserved instance of `years`: hourly fee plus the
    upfront fee over the term's hours; the first payment option of PAYMENT_PREFERENCE."""
    found: dict[str, float] = {}
    for term in product.get("terms", {}).get("Reserved", {}).values():
        attrs = term.get("termAttributes", {})
        if attrs.get("LeaseContractLength") != f"{years}yr" or attrs.get("OfferingClass") != "standard":
            continue
        hourly = upfront = 0.0
        for dim in term.get("priceDimensions", {}).values():
            usd = float(dim.get("pricePerUnit", {}).get("USD", "0"))
            if dim.get("unit") == "Hrs":
                hourly += usd
            elif dim.get("unit") == "Quantity":
                upfront += usd
        found[attrs.get("PurchaseOption", "")] = hourly + upfront / (years * HOURS_PER_YEAR)
    for option in PAYMENT_PREFERENCE:
        if option in found:
            return found[option]
    return None


def spot_mean(history: list[dict], start: dt.datetime, end: dt.datetime) -> float | None:
    """Time-weighted mean spot price over [start, end): each price holds from its timestamp
    until the next one; a price set before `start` holds from `start`. None without any."""
    points = sorted((h["Timestamp"], float(h["SpotPrice"])) for h in history
                    if h["Timestamp"] < end)
    if not points:
        return None
    total = weight = 0.0
    for i, (at, price) in enumerate(points):
        begin = max(at, start)
        until = points[i + 1][0] if i + 1 < len(points) else end
        seconds = (min(until, end) - begin).total_seconds()
        if seconds > 0:
            total += price * seconds
            weight += seconds
    if weight == 0:  # every price changed at the same instant: the last one holds
        return points[-1][1]
    return total / weight


@dataclass
class PriceBasesLookup:
    """Clients: `pricing` (us-east-1), `savingsplans`, and `ec2` in the run's region, each a
    boto3 client (tests: moto's server or a Stubber) called through one counting Caller."""

    pricing: Any
    savingsplans: Any
    ec2_for: Any  # region -> ec2 client
    call: Caller = field(default_factory=Caller)
    today: Any = None  # () -> date; None: today in UTC

    @classmethod
    def from_session(cls, session: Any, *, endpoint_url: str | None = None,
                     caller: Caller | None = None) -> PriceBasesLookup:
        return cls(make_client(session, "pricing", PRICING_REGION, endpoint_url),
                   make_client(session, "savingsplans", PRICING_REGION, endpoint_url),
                   lambda region: make_client(session, "ec2", region, endpoint_url),
                   caller or Caller())

    def lookup(self, manifest: dict) -> list[dict]:
        """Every basis that can be found for the run's instance type, region and zone."""
        itype, region = manifest.get("instance_type"), manifest.get("region")
        if not itype or not region:
            return []
        today = (self.today() if self.today else dt.datetime.now(dt.UTC).date()).isoformat()
        out: list[dict] = []
        for name, find in (("on-demand and reserved", self._price_list),
                           ("savings plans", self._savings_plans), ("spot", self._spot),
                           ("capacity blocks", self._capacity_block)):
            try:
                out += find(manifest, itype, region, today)
            except (AwsCallError, BillError, KeyError, ValueError,
                    botocore.exceptions.BotoCoreError, botocore.parsers.ResponseParserError) as exc:
                # a what-if price is optional: its absence never stops the run
                log.warning("what-if price %s for %s in %s not found: %s", name, itype,
                            region, exc)
        return out

    def _price_list(self, manifest, itype, region, today) -> list[dict]:
        product = PriceListApi(self.pricing, caller=self.call).product(itype, region)
        out = [entry("on_demand", on_demand_hourly(product)[0], "price_list", today, region)]
        for years in (1, 3):
            usd = reserved_hourly(product, years)
            if usd is not None:
                out.append(entry(f"reserved_{years}yr", usd, "price_list", today, region))
        return out

    def _savings_plans(self, manifest, itype, region, today) -> list[dict]:
        page = self._sp_rates(itype, region)
        rates: dict[str, set[float]] = {}
        for r in page:
            props = {p["name"]: p["value"] for p in r.get("properties", [])}
            basis = SP_DURATION_S.get(r["savingsPlanOffering"]["durationSeconds"])
            if (basis and r.get("unit") == "Hrs" and props.get("instanceType") == itype
                    and props.get("region") == region and "BoxUsage" in r.get("usageType", "")
                    and r["savingsPlanOffering"].get("currency", "USD") == "USD"):
                rates.setdefault(basis, set()).add(float(r["rate"]))
        out = []
        for basis in ("savings_plan_1yr", "savings_plan_3yr"):
            found = rates.get(basis, set())
            if len(found) > 1:
                raise ValueError(f"{basis}: {len(found)} different rates {sorted(found)}")
            if found:
                out.append(entry(basis, found.pop(), "price_list", today, region))
        return out

    def _sp_rates(self, itype: str, region: str) -> list[dict]:
        results: list[dict] = []
        token = None
        while True:
            page = self.call(
                self.savingsplans, "describe_savings_plans_offering_rates",
                savingsPlanPaymentOptions=["No Upfront"], savingsPlanTypes=["Compute"],
                products=["EC2"], serviceCodes=["AmazonEC2"], operations=["RunInstances"],
                filters=[{"name": "region", "values": [region]},
                         {"name": "instanceType", "values": [itype]},
                         {"name": "tenancy", "values": ["shared"]},
                         {"name": "productDescription", "values": ["Linux/UNIX"]}],
                **({"nextToken": token} if token else {}))
            results += page.get("searchResults", [])
            token = page.get("nextToken")
            if not token:
                return results

    def _spot(self, manifest, itype, region, today) -> list[dict]:
        az = manifest.get("availability_zone")
        if not az:
            raise ValueError("the run's availability zone is unknown")
        before = _run_start(manifest)
        start = before - dt.timedelta(days=SPOT_DAYS)
        ec2, history, token = self.ec2_for(region), [], None
        while True:
            page = self.call(ec2, "describe_spot_price_history", InstanceTypes=[itype],
                               ProductDescriptions=["Linux/UNIX"], StartTime=start,
                               EndTime=before,
                               Filters=[{"Name": "availability-zone", "Values": [az]}],
                               **({"NextToken": token} if token else {}))
            history += [h for h in page.get("SpotPriceHistory", [])
                        if h.get("AvailabilityZone") == az and h.get("InstanceType") == itype
                        and str(h.get("ProductDescription", "")).startswith("Linux/UNIX")]
            token = page.get("NextToken")
            if not token:
                break
        usd = spot_mean(history, start, before)
        if usd is None:
            raise ValueError(f"no spot price history in {az} for the {SPOT_DAYS} days before the run")
        return [entry("spot", usd, "spot_price_history", today, region)]

    def _capacity_block(self, manifest, itype, region, today) -> list[dict]:
        nodes = manifest.get("node_count") or 1
        ec2 = self.ec2_for(region)
        page = self.call(ec2, "describe_capacity_block_offerings", InstanceType=itype,
                         InstanceCount=nodes, CapacityDurationHours=CAPACITY_BLOCK_HOURS)
        per_node_hour = [
            float(o["UpfrontFee"]) / (o["CapacityBlockDurationHours"] * o["InstanceCount"])
            for o in page.get("CapacityBlockOfferings", [])
            if o.get("CurrencyCode", "USD") == "USD" and o.get("InstanceType") == itype
            and o.get("CapacityBlockDurationHours") and o.get("InstanceCount")]
        if not per_node_hour:
            raise ValueError("no Capacity Block offering")
        return [entry("capacity_block", min(per_node_hour), "capacity_block_offering", today,
                      region)]


def _run_start(manifest: dict) -> dt.datetime:
    """When the run began: its first recorded phase, else its creation."""
    from servingbench.resources.contract.timestamps import parse_ts

    starts = [parse_ts(p["started_at"]) for p in (manifest.get("phases") or {}).values()
              if p.get("started_at")]
    ns = min(starts) if starts else parse_ts(manifest["created_at"])
    return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC)


def sheet_bases(sheet: dict, instance_type: str) -> list[dict]:
    """The price sheet's bases for one instance type, labelled as the sheet is (price_source
    `price_sheet`; its `retrieved_on`, e.g. `unverified`)."""
    out = []
    for basis, prices in (sheet.get("price_bases") or {}).items():
        if instance_type in prices:
            out.append(entry(basis, prices[instance_type], "price_sheet",
                             str(sheet.get("retrieved_on")), str(sheet.get("region"))))
    return out
