"""The price-list bill (fake Pricing client: moto has no Pricing API) and its cross-check
against a Cost Explorer bill from moto's server."""

from __future__ import annotations

import httpx
import pytest
from servingbench.resources.aws.caller import Caller
from servingbench.resources.billing.cost_explorer import CostExplorerApi
from servingbench.resources.billing.normalize import BillError
from servingbench.resources.billing.price_list import PriceListApi
from servingbench.resources.contract.schemas import BILL

from tests.support.eks.billdata import (
    ACCOUNT,
    INSTANCE,
    NODES_DOWN,
    NODES_UP,
    NOW,
    PAGES,
    PRICE,
    RUN_ID,
)
from tests.support.eks.fakes import FakePricing, ec2_product

PRODUCTS = [
    ec2_product("WINDOWS1", INSTANCE, "us-east-1", "61.2000000000", os="Windows"),
    ec2_product("DEDICATED", INSTANCE, "us-east-1", "60.5400000000", tenancy="Dedicated"),
    ec2_product("OHIO0001", INSTANCE, "us-east-2", "55.0400000000", usagetype="USE2-BoxUsage:p5.48xlarge"),
    ec2_product("P5LINUX1", INSTANCE, "us-east-1", "55.0400000000"),
    ec2_product("P4DLINUX", "p4d.24xlarge", "us-east-1", "21.9576000000"),
]


def test_quote_picks_on_demand_linux_shared_tenancy():
    pricing = FakePricing(PRODUCTS)
    q = PriceListApi(pricing).quote(INSTANCE, "us-east-1")
    assert (q.usd_per_hour, q.sku, q.usage_type) == (55.04, "P5LINUX1", "BoxUsage:p5.48xlarge")
    fields = {f["Field"]: f["Value"] for f in pricing.requests[0]["Filters"]}
    assert fields["operatingSystem"] == "Linux" and fields["tenancy"] == "Shared"
    assert fields["capacitystatus"] == "Used" and fields["preInstalledSw"] == "NA"


def test_price_list_bill_rows_are_hand_computed():
    caller = Caller()
    bill = PriceListApi(FakePricing(PRODUCTS), caller=caller).fetch_bill(
        RUN_ID, INSTANCE, "us-east-1", 2, NODES_UP, NODES_DOWN, account_id=ACCOUNT)
    assert bill.schema.equals(BILL)
    rows = bill.to_pylist()
    assert [r["usage_quantity"] for r in rows] == pytest.approx([2 * 50 / 60, 2 * 15 / 60])
    assert [r["amount"] for r in rows] == pytest.approx([2 * 50 / 60 * PRICE, 2 * 15 / 60 * PRICE])
    assert {r["source"] for r in rows} == {"price_list"}
    assert {r["usage_unit"] for r in rows} == {"Hrs"} and {r["unit"] for r in rows} == {"USD"}
    assert rows[0]["usage_type"] == "BoxUsage:p5.48xlarge" and rows[0]["estimated"] is False
    assert caller.calls["pricing:GetProducts"] == 1


def test_no_or_ambiguous_product_is_a_clear_error():
    with pytest.raises(BillError, match="no on-demand Linux shared-tenancy product for g6e.48xlarge"):
        PriceListApi(FakePricing(PRODUCTS)).quote("g6e.48xlarge", "us-east-1")
    twice = PRODUCTS + [ec2_product("P5LINUX2", INSTANCE, "us-east-1", "55.0400000000")]
    with pytest.raises(BillError, match="2 products match .*P5LINUX1, P5LINUX2"):
        PriceListApi(FakePricing(twice)).quote(INSTANCE, "us-east-1")


def test_price_list_agrees_with_cost_explorer_within_one_percent(moto):
    endpoint, session = moto
    r = httpx.post(f"{endpoint}/moto-api/static/ce/cost-and-usage-results", json={"results": PAGES})
    assert r.status_code == 201
    ce_bill = CostExplorerApi(session, endpoint_url=endpoint, clock=lambda: NOW).fetch_bill(
        RUN_ID, INSTANCE, "us-east-1", NODES_UP, NODES_DOWN)
    pl_bill = PriceListApi(FakePricing(PRODUCTS)).fetch_bill(
        RUN_ID, INSTANCE, "us-east-1", 1, NODES_UP, NODES_DOWN, account_id=ACCOUNT)

    def instance_cost(bill):
        return sum(r["amount"] for r in bill.to_pylist()
                   if r["instance_type"] == INSTANCE and r["usage_unit"] == "Hrs")

    ce_cost, pl_cost = instance_cost(ce_bill), instance_cost(pl_bill)
    assert ce_cost == pytest.approx(59.6266666667, abs=1e-9)
    assert abs(pl_cost - ce_cost) / ce_cost <= 0.01
    # and a discounted bill (a 5 % savings plan) is caught by the same comparison
    assert abs(pl_cost - 0.95 * ce_cost) / (0.95 * ce_cost) > 0.01
