"""The eks profile's resources build from settings and share one call counter."""

from __future__ import annotations

import base64
import datetime

import pytest

from resources.eks import NodegroupSpec
from resources.eks_profile import EksResources, EksSettings
from resources.kube.client import KubeClient, KubeError

from .conftest import REGION
from .test_nodegroup_lifecycle import ROLE, make_cluster


def test_build_and_use(moto):
    endpoint, session = moto
    make_cluster(endpoint, session)
    eks = EksResources.build(EksSettings("bench", REGION, ROLE, endpoint_url=endpoint), session)
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
