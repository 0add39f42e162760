"""What-if price bases looked up when a run is made (contract §4.1): reserved from the Price
List (the fake Pricing client: moto has no Pricing API), savings plans and Capacity Blocks
through botocore's Stubber (moto has neither), spot price history from moto's server; every
figure hand-computed."""

from __future__ import annotations

import datetime as dt

import boto3
import pytest
from botocore.stub import Stubber
from servingbench.resources.aws.caller import Caller, make_client
from servingbench.resources.billing.price_bases import PriceBasesLookup, reserved_hourly, spot_mean

from tests.support.eks.aws import DUMMY_KEY_ID, DUMMY_SECRET
from tests.support.eks.fakes import FakePricing, ec2_product

ITYPE, REGION, AZ = "p5.48xlarge", "us-east-1", "us-east-1a"
MANIFEST = {"instance_type": ITYPE, "region": REGION, "availability_zone": AZ, "node_count": 2,
            "created_at": "2026-11-29T02:00:00.000000000Z",
            "phases": {"provision": {"started_at": "2026-11-29T02:00:00.000000000Z",
                                     "ended_at": "2026-11-29T02:09:00.000000000Z"}}}
RUN_START = dt.datetime(2026, 11, 29, 2, tzinfo=dt.UTC)


def _reserved(product: dict, years: int, option: str, hourly: str, upfront: str | None,
              offering_class: str = "standard") -> None:
    code = f"R{years}{option[:2].upper()}{offering_class[:1]}"
    dims = {f"{code}.H": {"unit": "Hrs", "pricePerUnit": {"USD": hourly}}}
    if upfront is not None:
        dims[f"{code}.U"] = {"unit": "Quantity", "pricePerUnit": {"USD": upfront}}
    product["terms"].setdefault("Reserved", {})[code] = {
        "termAttributes": {"LeaseContractLength": f"{years}yr", "OfferingClass": offering_class,
                           "PurchaseOption": option},
        "priceDimensions": dims}


def _product() -> dict:
    p = ec2_product("P5LINUX1", ITYPE, REGION, "55.0400000000")
    _reserved(p, 1, "No Upfront", "38.5000000000", None)
    _reserved(p, 1, "All Upfront", "0.0000000000", "300000")
    _reserved(p, 1, "No Upfront", "30.0000000000", None, offering_class="convertible")
    # 3 yr: no No Upfront offer; Partial Upfront: 12.00/h + 315360 upfront over 26280 h
    _reserved(p, 3, "Partial Upfront", "12.0000000000", "315360")
    _reserved(p, 3, "All Upfront", "0.0000000000", "600000")
    return p


def test_reserved_effective_hourly_by_hand():
    p = _product()
    assert reserved_hourly(p, 1) == pytest.approx(38.5)          # No Upfront, standard
    assert reserved_hourly(p, 3) == pytest.approx(12.0 + 315360 / 26280)  # = 24.0
    assert reserved_hourly(ec2_product("X", ITYPE, REGION, "1.0"), 1) is None


def test_spot_mean_is_time_weighted_over_the_seven_days():
    end = RUN_START
    start = end - dt.timedelta(days=7)
    history = [  # 10.0 set before the window holds 2 days, 20.0 for 4 days, 40.0 for 1 day
        {"Timestamp": start - dt.timedelta(days=30), "SpotPrice": "10.0"},
        {"Timestamp": start + dt.timedelta(days=2), "SpotPrice": "20.0"},
        {"Timestamp": start + dt.timedelta(days=6), "SpotPrice": "40.0"},
        {"Timestamp": end + dt.timedelta(hours=1), "SpotPrice": "99.0"},  # after the run
    ]
    assert spot_mean(history, start, end) == pytest.approx((10 * 2 + 20 * 4 + 40 * 1) / 7)
    assert spot_mean(history[3:], start, end) is None


def _client(service: str, region: str = REGION):
    return boto3.client(service, region_name=region, aws_access_key_id=DUMMY_KEY_ID,
                        aws_secret_access_key=DUMMY_SECRET)


def _sp_result(duration_s: int, rate: str, usage_type: str = "BoxUsage:p5.48xlarge") -> dict:
    return {"savingsPlanOffering": {"offeringId": f"o-{duration_s}", "paymentOption": "No Upfront",
                                    "planType": "Compute", "durationSeconds": duration_s,
                                    "currency": "USD", "planDescription": "Compute SP"},
            "rate": rate, "unit": "Hrs", "productType": "EC2", "serviceCode": "AmazonEC2",
            "usageType": usage_type, "operation": "RunInstances",
            "properties": [{"name": "region", "value": REGION},
                           {"name": "instanceType", "value": ITYPE},
                           {"name": "tenancy", "value": "shared"},
                           {"name": "productDescription", "value": "Linux/UNIX"}]}


def test_every_basis_hand_computed(moto):
    moto_url, session = moto
    sp = _client("savingsplans")
    ec2_stubbed = _client("ec2")
    ec2_moto = make_client(session, "ec2", REGION, moto_url)
    caller = Caller()
    with Stubber(sp) as sp_stub, Stubber(ec2_stubbed) as cb_stub:
        sp_stub.add_response("describe_savings_plans_offering_rates", {
            "searchResults": [_sp_result(31_536_000, "40.0"),
                              _sp_result(94_608_000, "27.5"),
                              _sp_result(31_536_000, "44.0", "DedicatedUsage:p5.48xlarge")]})
        cb_stub.add_response("describe_capacity_block_offerings", {"CapacityBlockOfferings": [
            {"CapacityBlockOfferingId": "cb-1", "InstanceType": ITYPE, "AvailabilityZone": AZ,
             "InstanceCount": 2, "CapacityBlockDurationHours": 24, "UpfrontFee": "1510.27",
             "CurrencyCode": "USD"},
            {"CapacityBlockOfferingId": "cb-2", "InstanceType": ITYPE, "AvailabilityZone": AZ,
             "InstanceCount": 2, "CapacityBlockDurationHours": 24, "UpfrontFee": "1632.00",
             "CurrencyCode": "USD"}]}, {"InstanceType": ITYPE, "InstanceCount": 2,
                                        "CapacityDurationHours": 24})
        ec2_for = {"calls": 0}

        def ec2(region):
            # spot from moto's server, the Capacity Block offerings from the stub
            assert region == REGION
            ec2_for["calls"] += 1
            return ec2_moto if ec2_for["calls"] == 1 else ec2_stubbed

        lookup = PriceBasesLookup(FakePricing([_product()]), sp, ec2, caller,
                                  today=lambda: dt.date(2026, 11, 28))
        bases = {b["basis"]: b for b in lookup.lookup(MANIFEST)}
        sp_stub.assert_no_pending_responses()
        cb_stub.assert_no_pending_responses()
    price = {k: v["hourly_usd_per_node"] for k, v in bases.items()}
    assert price == pytest.approx({
        "on_demand": 55.04, "reserved_1yr": 38.5, "reserved_3yr": 24.0,
        "savings_plan_1yr": 40.0, "savings_plan_3yr": 27.5,
        # moto's spot price history is one price, 0.00001, set long before the window
        "spot": 0.00001,
        "capacity_block": 1510.27 / (24 * 2)})  # the cheaper offering per node-hour
    src = {k: v["price_source"] for k, v in bases.items()}
    assert src["spot"] == "spot_price_history" and src["capacity_block"] == "capacity_block_offering"
    assert {src[k] for k in ("on_demand", "reserved_1yr", "savings_plan_3yr")} == {"price_list"}
    assert {(v["retrieved_on"], v["region"]) for v in bases.values()} == {("2026-11-28", REGION)}
    assert caller.calls["ec2:DescribeSpotPriceHistory"] == 1
    assert caller.calls["savingsplans:DescribeSavingsPlansOfferingRates"] == 1


def test_a_basis_that_cannot_be_found_is_left_out_never_invented(moto):
    moto_url, session = moto
    sp = _client("savingsplans")
    with Stubber(sp) as sp_stub:
        sp_stub.add_client_error("describe_savings_plans_offering_rates", "ValidationException")
        lookup = PriceBasesLookup(FakePricing([]), sp,
                                  lambda region: make_client(session, "ec2", region, moto_url),
                                  Caller(max_attempts=1))
        m = dict(MANIFEST, availability_zone="us-east-1-nowhere")
        assert lookup.lookup(m) == []  # no product, SP refused, no spot history, no block
