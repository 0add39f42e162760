"""The eks profile's resources build from settings and share one call counter."""

from __future__ import annotations

import base64
import datetime

import pytest
from servingbench.pipelines.eks_profile import EksResources, EksSettings
from servingbench.resources.cluster.eks_api import NodegroupSpec
from servingbench.resources.model_server.kube.client import KubeClient, KubeError

from tests.support.eks.aws import OWNER, REGION, ROLE, make_cluster


def test_build_and_use(moto):
    endpoint, session = moto
    make_cluster(endpoint, session)
    eks = EksResources.build(EksSettings("bench", REGION, ROLE, OWNER, endpoint_url=endpoint), session)
    eks.cluster.poll_s = 0.1
    with eks.cluster.provisioned(NodegroupSpec("c", "g6e.48xlarge"), "run-p", timeout_s=10):
        # moto's cluster CA is random bytes, not a PEM: refused with a clear error
        with pytest.raises(KubeError, match="certificateAuthority.data is not a base64 PEM"):
            eks.kube()
    bill = eks.billing.fetch_bill("run-p", "g6e.48xlarge", REGION, 0, 3600 * 10**9)
    assert bill.num_rows == 0
    calls = eks.caller.calls
    assert calls["eks:CreateNodegroup"] == calls["eks:DeleteNodegroup"] == 1
    assert calls["eks:DescribeCluster"] >= 1 and calls["ce:GetCostAndUsage"] == 1


def test_kube_client_trusts_the_clusters_ca():
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    pem = cert.public_bytes(serialization.Encoding.PEM)
    kube = KubeClient.for_eks({"endpoint": "https://ABC.gr7.us-east-1.eks.amazonaws.com",
                               "certificateAuthority": {"data": base64.b64encode(pem).decode()}},
                              lambda: "unused")
    assert kube.server == "https://ABC.gr7.us-east-1.eks.amazonaws.com"
    kube.close()


def test_settings_from_env_and_pipeline_resources(moto):
    from servingbench.resources.billing.interface import BillSource
    from servingbench.resources.cluster.interface import Cluster
    from servingbench.resources.model_server.interface import ModelServer

    endpoint, session = moto
    with pytest.raises(ValueError, match="needs SERVINGBENCH_EKS_NODE_ROLE_ARN"):
        EksSettings.from_env({"SERVINGBENCH_EKS_CLUSTER": "bench",
                              "SERVINGBENCH_EKS_REGION": REGION})
    settings = EksSettings.from_env({
        "SERVINGBENCH_EKS_CLUSTER": "bench", "SERVINGBENCH_EKS_REGION": REGION,
        "SERVINGBENCH_EKS_NODE_ROLE_ARN": ROLE, "SERVINGBENCH_EKS_OWNER": OWNER,
        "SERVINGBENCH_EKS_SUBNETS": "subnet-a, subnet-b",
        "SERVINGBENCH_EKS_SOURCE_RANGES": "10.0.0.0/16"})
    assert settings.subnet_ids == ("subnet-a", "subnet-b")
    assert settings.source_ranges == ("10.0.0.0/16",) and settings.expose == "load_balancer"
    res = EksResources.build(settings, session).pipeline_resources()
    assert isinstance(res["cluster"], Cluster) and res["cluster"].emulated is False
    assert isinstance(res["model_server"], ModelServer)
    assert isinstance(res["bill_source"], BillSource) and res["bill_source"].source == "cost_explorer"


BASE_ENV = {"SERVINGBENCH_EKS_CLUSTER": "bench", "SERVINGBENCH_EKS_REGION": REGION,
            "SERVINGBENCH_EKS_NODE_ROLE_ARN": ROLE, "SERVINGBENCH_EKS_OWNER": OWNER,
            "SERVINGBENCH_EKS_SOURCE_RANGES": "10.0.0.0/16"}


@pytest.mark.parametrize("change, message", [
    ({"SERVINGBENCH_EKS_OWNER": ""}, "needs SERVINGBENCH_EKS_OWNER"),
    ({"SERVINGBENCH_EKS_OWNER": "Team A"}, "SERVINGBENCH_EKS_OWNER='Team A'"),
    ({"SERVINGBENCH_EKS_SOURCE_RANGES": "10.0.0.0/16,0.0.0.0/0"},
     "SERVINGBENCH_EKS_SOURCE_RANGES=0.0.0.0/0 .* SERVINGBENCH_EKS_ALLOW_PUBLIC=plaintext-api-key"),
    ({"SERVINGBENCH_EKS_SOURCE_RANGES": "::/0"}, "SERVINGBENCH_EKS_ALLOW_PUBLIC=plaintext-api-key"),
    # everyone without a /0: two halves, or any range that is not private
    ({"SERVINGBENCH_EKS_SOURCE_RANGES": "0.0.0.0/1,128.0.0.0/1"},
     "SERVINGBENCH_EKS_SOURCE_RANGES=0.0.0.0/1 is not a private range"),
    ({"SERVINGBENCH_EKS_SOURCE_RANGES": "10.0.0.0/16,8.8.8.0/24"},
     "8.8.8.0/24 is not a private range"),
    ({"SERVINGBENCH_EKS_SOURCE_RANGES": "10.0.0.0/7"}, "10.0.0.0/7 is not a private range"),
    # a bare "1" names no risk: refused, saying which one it would accept
    ({"SERVINGBENCH_EKS_ALLOW_PUBLIC": "1"}, "must name the risk it accepts: plaintext-api-key"),
    ({"SERVINGBENCH_EKS_SOURCE_RANGES": "everyone"}, "SERVINGBENCH_EKS_SOURCE_RANGES: 'everyone'"),
    ({"SERVINGBENCH_EKS_LB_SCHEME": "internet-facing"},
     "SERVINGBENCH_EKS_LB_SCHEME=internet-facing .* SERVINGBENCH_EKS_ALLOW_PUBLIC=plaintext-api-key"),
    ({"SERVINGBENCH_EKS_ALLOW_PUBLIC": "yes"}, "SERVINGBENCH_EKS_ALLOW_PUBLIC='yes'"),
    ({"SERVINGBENCH_EKS_RUN_AS_USER": "0"}, "SERVINGBENCH_EKS_RUN_AS_USER='0'"),
])
def test_unsafe_or_malformed_eks_settings_are_refused_naming_the_variable(change, message):
    with pytest.raises(ValueError, match=message):
        EksSettings.from_env({**BASE_ENV, **change})


def test_public_exposure_with_explicit_consent():
    s = EksSettings.from_env({**BASE_ENV, "SERVINGBENCH_EKS_SOURCE_RANGES": "0.0.0.0/0",
                              "SERVINGBENCH_EKS_LB_SCHEME": "internet-facing",
                              "SERVINGBENCH_EKS_ALLOW_PUBLIC": "plaintext-api-key",
                              "SERVINGBENCH_EKS_RUN_AS_USER": "1000"})
    assert s.allow_public and s.lb_scheme == "internet-facing" and s.run_as_user == 1000


def test_servingbench_run_refuses_an_open_engine_with_exit_2(tmp_path, monkeypatch, capsys):
    from servingbench.pipelines.cli import main as cli

    for k, v in {**BASE_ENV, "SERVINGBENCH_EKS_SOURCE_RANGES": "0.0.0.0/0",
                 "SERVINGBENCH_PROFILE": "eks", "DAGSTER_HOME": str(tmp_path),
                 "SERVINGBENCH_DATA_DIR": str(tmp_path / "data")}.items():
        monkeypatch.setenv(k, v)
    assert cli(["run", "--candidate", "p5-scout-bf16-tp8"]) == 2
    err = capsys.readouterr().err
    assert "SERVINGBENCH_EKS_ALLOW_PUBLIC=plaintext-api-key" in err and "Traceback" not in err
    assert not (tmp_path / "data" / "runs").exists()  # nothing was started
