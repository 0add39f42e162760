"""`servingbench eks bill|reap` and the bill refresh, against moto's server."""

from __future__ import annotations

import dataclasses

import httpx
import pytest
from servingbench.pipelines.cli.eks import main
from servingbench.resources.billing.cost_explorer import billing_window
from servingbench.resources.cluster.eks_api import EksNodegroups, NodegroupSpec
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.schemas import BILL, read_records
from servingbench.resources.model_server.kube.client import KubeClient
from servingbench.resources.model_server.kube.render import render
from servingbench.resources.model_server.kube.token import TokenSource

from tests.support.eks.aws import DUMMY_KEY_ID, DUMMY_SECRET, OWNER, REGION, ROLE, make_cluster
from tests.support.eks.billdata import ACCOUNT, INSTANCE, PAGES, RUN_ID
from tests.support.eks.fake_kube import FakeKubeApi
from tests.support.eks.specs import SGLANG_GPU

H = 3600 * 10**9


def manifest(source="measured"):
    m = mf.empty(RUN_ID, source, mf.parse_ts("2026-11-29T02:10:00Z"))
    m.update(instance_type=INSTANCE, region=REGION, account_id=ACCOUNT, node_count=1)
    span = lambda a, b: {"started_at": f"2026-11-29T{a}Z", "ended_at": f"2026-11-29T{b}Z"}  # noqa: E731
    m["phases"] = {"provision": span("02:10:00", "02:19:00"), "deploy": span("02:19:00", "02:40:00"),
                   "steady": span("02:45:00", "03:05:00")}
    return m


def test_billing_window_runs_from_provision_to_last_phase_plus_tail():
    start, end = billing_window(manifest())
    assert start == mf.parse_ts("2026-11-29T02:10:00Z")
    assert end == mf.parse_ts("2026-11-29T03:05:00Z") + H


def test_bill_command_writes_the_bill(moto, tmp_path, capsys, monkeypatch):
    endpoint, _ = moto
    monkeypatch.setattr("servingbench.resources.billing.cost_explorer.time.time_ns",
                        lambda: mf.parse_ts("2026-11-29T12:00:00Z"))
    httpx.post(f"{endpoint}/moto-api/static/ce/cost-and-usage-results", json={"results": PAGES})
    mf.dump(manifest(), tmp_path / "manifest.json")
    assert main(["bill", str(tmp_path), "--endpoint-url", endpoint]) == 0
    bill = read_records(tmp_path, "bill")
    assert bill.schema.equals(BILL) and bill.num_rows == 3
    out = capsys.readouterr()
    assert "HOURLY, 3 page(s), 3 Cost Explorer request(s) = $0.03" in out.out
    assert DUMMY_SECRET not in out.out + out.err


def test_bill_command_refuses_bad_input_without_traceback(moto, tmp_path, capsys):
    endpoint, _ = moto
    assert main(["bill", str(tmp_path / "missing"), "--endpoint-url", endpoint]) == 2
    err = capsys.readouterr().err
    assert "manifest.json: missing" in err and "Traceback" not in err
    mf.dump(manifest("emulated"), tmp_path / "manifest.json")
    assert main(["bill", str(tmp_path), "--endpoint-url", endpoint]) == 2
    assert "only measured runs" in capsys.readouterr().err
    assert not (tmp_path / "bill.parquet").exists()


def test_reap_command(moto, capsys):
    endpoint, session = moto
    make_cluster(endpoint, session)
    cluster = EksNodegroups(session, "bench", REGION, node_role_arn=ROLE, owner=OWNER, endpoint_url=endpoint,
                         poll_s=0.1)
    info = cluster.create_nodegroup(NodegroupSpec("c", INSTANCE), "run-to-reap", timeout_s=10)
    args = ["reap", "--cluster", "bench", "--region", REGION, "--endpoint-url", endpoint,
            "--owner", OWNER]
    assert main(args + ["--ttl-hours", "6", "--no-kubernetes"]) == 0
    assert "reaped 0 resource(s)" in capsys.readouterr().out
    # old enough, but its heartbeat is fresh
    assert main(args + ["--ttl-hours", "0", "--no-kubernetes"]) == 0
    assert "reaped 0 resource(s)" in capsys.readouterr().out
    with FakeKubeApi(cluster="bench", key_id=DUMMY_KEY_ID) as api:
        kube = KubeClient(api.url, TokenSource.for_eks(session, "bench", REGION))
        spec = dataclasses.replace(SGLANG_GPU, run_id="run-to-reap", nodegroup=info.nodegroup,
                                   owner=OWNER)
        for obj in render(spec):
            kube.apply(obj)
        assert main(args + ["--ttl-hours", "0", "--heartbeat-stale-minutes", "0",
                            "--kube-url", api.url]) == 0
        out = capsys.readouterr().out
        assert f"reaped 4 resource(s)\n  {info.nodegroup}\n  Service/{spec.name}" in out
        assert api.objects == {}  # the Service (its load balancer), Deployment, NetworkPolicy


def test_reap_command_refuses_bad_input(moto, capsys, monkeypatch):
    endpoint, _ = moto
    monkeypatch.delenv("SERVINGBENCH_EKS_OWNER", raising=False)
    args = ["reap", "--cluster", "bench", "--region", REGION, "--endpoint-url", endpoint]
    assert main(args) == 2
    assert "needs SERVINGBENCH_EKS_OWNER" in capsys.readouterr().err
    assert main(args + ["--owner", "Bad/Owner"]) == 2
    assert "--owner='Bad/Owner'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(args + ["--owner", OWNER, "--ttl-hours", "-1"])
    assert exit_.value.code == 2 and "--ttl-hours: expected a number >= 0" in capsys.readouterr().err
