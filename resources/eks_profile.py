"""Everything the `eks` profile needs, built from one settings object, for the lead's
profile wiring (pipelines/ picks the profile; this only builds what it asks for).

    settings = EksSettings(cluster_name="bench", region="us-east-1", node_role_arn="arn:…")
    eks = EksResources.build(settings)          # boto3's default credential chain
    with eks.cluster.provisioned(spec, run_id) as ng: ...
    kube = eks.kube()                           # DescribeCluster + presigned token
    bill = eks.billing.fetch_bill(...)          # Cost Explorer
    check = eks.price_list.fetch_bill(...)      # Price List cross-check

Nothing here reads the environment at import time; `build` is called when a run starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from resources.aws_retry import Caller
from resources.billing.cost_explorer import CostExplorerBilling
from resources.billing.price_list import PriceListBilling
from resources.eks import EksCluster
from resources.kube.client import KubeClient
from resources.kube.token import TokenSource


@dataclass(frozen=True)
class EksSettings:
    cluster_name: str
    region: str
    node_role_arn: str
    subnet_ids: tuple[str, ...] = ()  # empty: the cluster's own subnets
    namespace: str = "servingbench"
    reaper_ttl_hours: float = 6.0
    provision_timeout_s: float = 1800.0
    deploy_timeout_s: float = 3600.0
    endpoint_url: str | None = None  # tests only (moto)


@dataclass
class EksResources:
    settings: EksSettings
    session: Any
    cluster: EksCluster
    billing: CostExplorerBilling
    price_list: PriceListBilling
    caller: Caller = field(default_factory=Caller)

    @classmethod
    def build(cls, settings: EksSettings, session: Any = None) -> EksResources:
        if session is None:
            import boto3

            session = boto3.Session(region_name=settings.region)
        caller = Caller()  # one counter for the whole run: every AWS request, priced or free
        s = settings
        return cls(
            settings=s, session=session, caller=caller,
            cluster=EksCluster(session, s.cluster_name, s.region, node_role_arn=s.node_role_arn,
                               subnet_ids=list(s.subnet_ids) or None,
                               endpoint_url=s.endpoint_url, caller=caller),
            billing=CostExplorerBilling(session, endpoint_url=s.endpoint_url, caller=caller),
            price_list=PriceListBilling.from_session(session, endpoint_url=s.endpoint_url,
                                                     caller=caller),
        )

    def kube(self) -> KubeClient:
        """A Kubernetes client for the cluster (endpoint and CA from DescribeCluster)."""
        s = self.settings
        token = TokenSource.for_eks(self.session, s.cluster_name, s.region,
                                    sts_url=s.endpoint_url)
        return KubeClient.for_eks(self.cluster.describe_cluster(), token, namespace=s.namespace)
