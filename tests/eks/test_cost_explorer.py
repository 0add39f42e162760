"""Cost Explorer bills through moto's server: paging, throttling, fallback, exact rows."""

from __future__ import annotations

import httpx
import pytest
from servingbench.resources.aws.caller import AwsCallError, Caller, PermissionDenied
from servingbench.resources.billing.cost_explorer import CostExplorerApi
from servingbench.resources.contract.schemas import BILL
from servingbench.resources.contract.timestamps import parse_ts

from tests.support.eks.billdata import ACCOUNT, INSTANCE, NODES_DOWN, NODES_UP, NOW, PAGES, RUN_ID
from tests.support.eks.fakes import ErrorProxy


def queue(endpoint, results):
    r = httpx.post(f"{endpoint}/moto-api/static/ce/cost-and-usage-results",
                   json={"results": results})
    assert r.status_code == 201


def billing(session, endpoint, sleeps=None):
    caller = Caller(sleep=(sleeps.append if sleeps is not None else lambda s: None))
    return CostExplorerApi(session, endpoint_url=endpoint, caller=caller, clock=lambda: NOW)


def test_clean_bill_over_three_pages_is_exactly_the_bill_schema(moto):
    endpoint, session = moto
    queue(endpoint, PAGES)
    ce = billing(session, endpoint)
    bill = ce.fetch_bill(RUN_ID, INSTANCE, "us-east-1", NODES_UP, NODES_DOWN)
    assert bill.schema.equals(BILL)  # names, types, order
    rows = bill.to_pylist()
    assert len(rows) == 3
    h = lambda t: parse_ts(t)  # noqa: E731
    first = rows[0]
    assert first == {
        "run_id": RUN_ID, "period_start": first["period_start"], "period_end": first["period_end"],
        "account_id": ACCOUNT, "region": "us-east-1",
        "service": "Amazon Elastic Compute Cloud - Compute",
        "usage_type": "BoxUsage:p5.48xlarge", "instance_type": INSTANCE,
        "tag_key": "servingbench:run-id", "tag_value": RUN_ID, "metric": "UnblendedCost",
        "amount": 45.8666666667, "unit": "USD", "usage_quantity": 0.8333333333,
        "usage_unit": "Hrs", "estimated": True, "source": "cost_explorer",
    }
    starts = bill.column("period_start").cast("int64").to_pylist()
    ends = bill.column("period_end").cast("int64").to_pylist()
    assert starts == [h("2026-11-29T02:00:00Z")] * 2 + [h("2026-11-29T03:00:00Z")]
    assert ends == [h("2026-11-29T03:00:00Z")] * 2 + [h("2026-11-29T04:00:00Z")]
    assert rows[1]["usage_type"] == "EBS:VolumeUsage.gp3" and rows[1]["usage_unit"] == "GB-Mo"
    assert rows[1]["instance_type"] == "NoInstanceType" and rows[1]["service"] == "EC2 - Other"
    assert rows[2]["estimated"] is False and rows[2]["amount"] == 13.76
    # hand-computed: 50 min + 15 min of one node at $55.04/h
    instance_cost = sum(r["amount"] for r in rows if r["usage_unit"] == "Hrs")
    assert instance_cost == pytest.approx(55.04 * 65 / 60, rel=1e-9)
    assert ce.last_fetch.pages == 3 and ce.last_fetch.api_calls == 3
    assert ce.last_fetch.cost_usd == 0.03 and ce.last_fetch.granularity == "HOURLY"
    assert bill.schema.metadata[b"servingbench.granularity"] == b"HOURLY"


def test_throttling_is_retried_with_backoff_and_every_call_counted(moto, caplog):
    endpoint, session = moto
    queue(endpoint, PAGES)
    sleeps: list[float] = []
    with ErrorProxy(endpoint, "GetCostAndUsage", "ThrottlingException", times=2) as proxy:
        ce = billing(session, proxy.url, sleeps)
        with caplog.at_level("INFO", logger="servingbench"):
            bill = ce.fetch_bill(RUN_ID, INSTANCE, "us-east-1", NODES_UP, NODES_DOWN)
    assert bill.num_rows == 3
    assert len(sleeps) == 2 and sleeps[1] <= 1.0  # full jitter under 0.5 s × 2^attempt
    assert ce.last_fetch.api_calls == 5 and ce.last_fetch.cost_usd == 0.05
    assert ce.call.calls["ce:GetCostAndUsage"] == 5
    assert "5 request(s) = $0.05" in caplog.text
    assert sum("ThrottlingException, retrying" in r.message for r in caplog.records) == 2


def test_throttling_that_never_ends_fails_with_a_clear_error(moto):
    endpoint, session = moto
    with ErrorProxy(endpoint, "GetCostAndUsage", "ThrottlingException", times=99) as proxy:
        ce = billing(session, proxy.url)
        with pytest.raises(AwsCallError, match="ce:GetCostAndUsage failed after 6 attempts"):
            ce.fetch_bill(RUN_ID, INSTANCE, "us-east-1", NODES_UP, NODES_DOWN)


def test_access_denied_fails_fast_naming_the_action(moto):
    endpoint, session = moto
    with ErrorProxy(endpoint, "GetCostAndUsage", "AccessDeniedException", times=1) as proxy:
        ce = billing(session, proxy.url)
        with pytest.raises(PermissionDenied, match="ce:GetCostAndUsage") as err:
            ce.fetch_bill(RUN_ID, INSTANCE, "us-east-1", NODES_UP, NODES_DOWN)
    assert err.value.action == "ce:GetCostAndUsage"
    assert ce.call.calls["ce:GetCostAndUsage"] == 1  # no retry


def test_hourly_unavailable_falls_back_to_daily_and_says_so(moto):
    endpoint, session = moto
    daily = {"ResultsByTime": [{"TimePeriod": {"Start": "2026-11-29", "End": "2026-11-30"},
                                "Total": {}, "Estimated": True, "Groups": [
        {"Keys": ["BoxUsage:p5.48xlarge", INSTANCE], "Metrics": {
            "UnblendedCost": {"Amount": "59.6266666667", "Unit": "USD"},
            "UsageQuantity": {"Amount": "1.0833333333", "Unit": "Hrs"}}}]}]}
    queue(endpoint, [daily])
    with ErrorProxy(endpoint, "GetCostAndUsage", "DataUnavailableException", times=1) as proxy:
        ce = billing(session, proxy.url)
        bill = ce.fetch_bill(RUN_ID, INSTANCE, "us-east-1", NODES_UP, NODES_DOWN)
    assert ce.last_fetch.granularity == "DAILY" and "HOURLY unavailable" in ce.last_fetch.note
    assert bill.schema.metadata[b"servingbench.granularity"] == b"DAILY"
    assert b"HOURLY unavailable" in bill.schema.metadata[b"servingbench.note"]
    row = bill.to_pylist()[0]
    assert row["amount"] == 59.6266666667 and row["usage_quantity"] == 1.0833333333
    assert bill.column("period_start").cast("int64")[0].as_py() == parse_ts("2026-11-29T00:00:00Z")


def test_old_window_goes_daily_without_asking_hourly(moto):
    endpoint, session = moto
    ce = CostExplorerApi(session, endpoint_url=endpoint,
                             clock=lambda: NOW + 20 * 24 * 3600 * 10**9)
    bill = ce.fetch_bill(RUN_ID, INSTANCE, "us-east-1", NODES_UP, NODES_DOWN)
    assert ce.last_fetch.granularity == "DAILY" and ce.last_fetch.api_calls == 1
    assert bill.num_rows == 0 and bill.schema.equals(BILL)


def test_bill_before_usage_appears_is_empty_never_filled_in(moto):
    endpoint, session = moto  # nothing queued: Cost Explorer has no usage yet
    bill = billing(session, endpoint).fetch_bill(RUN_ID, INSTANCE, "us-east-1", NODES_UP, NODES_DOWN)
    assert bill.num_rows == 0 and bill.schema.equals(BILL)


def test_a_group_without_cost_is_a_clear_error(moto):
    endpoint, session = moto
    bad = {"ResultsByTime": [{"TimePeriod": {"Start": "2026-11-29T02:00:00Z",
                                             "End": "2026-11-29T03:00:00Z"},
                              "Estimated": True, "Groups": [
        {"Keys": ["BoxUsage:p5.48xlarge", INSTANCE],
         "Metrics": {"UsageQuantity": {"Amount": "1", "Unit": "Hrs"}}}]}]}
    queue(endpoint, [bad])
    with pytest.raises(ValueError, match="metric 'UnblendedCost' missing"):
        billing(session, endpoint).fetch_bill(RUN_ID, INSTANCE, "us-east-1", NODES_UP, NODES_DOWN)
