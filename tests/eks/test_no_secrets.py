"""No AWS credential or EKS token appears in any log line, error, repr or written output.

Runs the whole eks path once (node group, scope, Kubernetes deploy with a presigned
token, Cost Explorer with a throttled call, price list, bill written to disk, a denied
call) with every log captured, then scans it all for the dummy secrets.
"""

from __future__ import annotations

import logging

import boto3
import httpx
import pytest
from servingbench.resources.aws.caller import Caller, PermissionDenied
from servingbench.resources.billing.cost_explorer import CostExplorerApi
from servingbench.resources.billing.price_list import PriceListApi
from servingbench.resources.cluster.eks_api import EksNodegroups, NodegroupSpec
from servingbench.resources.contract.schemas import write_parquet
from servingbench.resources.model_server.kube.client import KubeClient
from servingbench.resources.model_server.kube.deploy import EngineDeployment
from servingbench.resources.model_server.kube.render import to_yaml
from servingbench.resources.model_server.kube.token import TokenSource

from tests.support.eks.aws import (
    DUMMY_KEY_ID,
    DUMMY_SECRET,
    DUMMY_SESSION_TOKEN,
    OWNER,
    REGION,
    ROLE,
    make_cluster,
)
from tests.support.eks.billdata import INSTANCE, NODES_DOWN, NODES_UP, NOW, PAGES, RUN_ID
from tests.support.eks.fake_kube import FakeKubeApi
from tests.support.eks.fakes import ErrorProxy, FakePricing, ec2_product
from tests.support.eks.specs import VLLM_GPU


def test_no_credential_or_token_in_any_log_or_output(moto, tmp_path, caplog, capsys):
    endpoint, session = moto
    caplog.set_level(logging.INFO)  # everything at INFO, ours at DEBUG
    caplog.set_level(logging.DEBUG, logger="servingbench")
    outputs: list[str] = []
    make_cluster(endpoint, session)
    cluster = EksNodegroups(session, "bench", REGION, node_role_arn=ROLE, owner=OWNER, endpoint_url=endpoint,
                         poll_s=0.1)
    outputs.append(repr(cluster))
    with cluster.provisioned(NodegroupSpec("p5-scout", INSTANCE), RUN_ID, timeout_s=10) as info:
        outputs += [repr(info), repr(cluster.describe_scope(info))]
        tokens = TokenSource.for_eks(boto3.Session(), "bench", REGION)
        issued = tokens()
        with FakeKubeApi(cluster="bench", key_id=DUMMY_KEY_ID, ready_after=1) as api:
            kube = KubeClient(api.url, tokens, sleep=lambda s: None)
            dep = EngineDeployment(kube, VLLM_GPU)
            with dep.deployed(timeout_s=30, poll_s=0) as engine:
                outputs += [repr(kube), repr(tokens), repr(engine), repr(dep), to_yaml(dep.objects[1:])]
                api_key = dep.api_key

    httpx.post(f"{endpoint}/moto-api/static/ce/cost-and-usage-results", json={"results": PAGES})
    with ErrorProxy(endpoint, "GetCostAndUsage", "ThrottlingException", times=1) as proxy:
        ce = CostExplorerApi(session, endpoint_url=proxy.url, clock=lambda: NOW,
                                 caller=Caller(sleep=lambda s: None))
        bill = ce.fetch_bill(RUN_ID, INSTANCE, REGION, NODES_UP, NODES_DOWN)
        sent = proxy.seen
    write_parquet(bill, tmp_path / "bill.parquet")
    pl = PriceListApi(FakePricing([ec2_product("S1", INSTANCE, REGION, "55.04")]))
    write_parquet(pl.fetch_bill(RUN_ID, INSTANCE, REGION, 1, NODES_UP, NODES_DOWN),
                  tmp_path / "price_list_bill.parquet")
    with ErrorProxy(endpoint, "GetCostAndUsage", "AccessDeniedException", times=1) as proxy:
        denied = CostExplorerApi(session, endpoint_url=proxy.url, clock=lambda: NOW)
        with pytest.raises(PermissionDenied) as err:
            denied.fetch_bill(RUN_ID, INSTANCE, REGION, NODES_UP, NODES_DOWN)
        outputs.append(str(err.value))

    # the secrets really were in use (so the scan below can fail) ...
    assert any(DUMMY_KEY_ID in h["headers"].get("Authorization", "") for h in sent)
    assert any(DUMMY_SESSION_TOKEN == h["headers"].get("X-Amz-Security-Token") for h in sent)
    assert issued.startswith("k8s-aws-v1.")
    assert any(o.get("stringData", {}).get("key") == api_key for o in api.objects.values()) \
        or any(r["method"] == "PATCH" and "/secrets/" in r["path"] for r in api.requests)
    # ... and appear nowhere we write
    captured = capsys.readouterr()
    haystacks = {
        "log": caplog.text + "\n".join(r.getMessage() for r in caplog.records),
        "stdout": captured.out, "stderr": captured.err, "outputs": "\n".join(outputs),
        **{p.name: p.read_bytes().decode("latin-1") for p in tmp_path.iterdir()},
    }
    needles = {"access key id": DUMMY_KEY_ID, "secret key": DUMMY_SECRET,
               "session token": DUMMY_SESSION_TOKEN, "EKS token": issued,
               "EKS token body": issued.removeprefix("k8s-aws-v1.")[:40], "bearer": "Bearer ",
               "engine API key": api_key}
    assert len(caplog.records) > 20  # the scan has something to scan
    for where, text in haystacks.items():
        for what, secret in needles.items():
            assert secret not in text, f"{what} leaked into {where}"
