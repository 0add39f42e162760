"""Everything the `eks` profile needs, built from one settings object, for the lead's
profile wiring (pipelines/ picks the profile; this only builds what it asks for).

    settings = EksSettings(cluster_name="bench", region="us-east-1", node_role_arn="arn:…")
    eks = EksResources.build(settings)          # boto3's default credential chain
    with eks.cluster.provisioned(spec, run_id) as ng: ...
    kube = eks.kube()                           # DescribeCluster + presigned token
    bill = eks.billing.fetch_bill(...)          # Cost Explorer
    check = eks.price_list.fetch_bill(...)      # Price List cross-check

For pipelines/eks_profile.py (the lead's wiring):

    def eks_resources(settings, candidates) -> dict:
        from resources.eks_profile import EksResources, EksSettings
        return EksResources.build(EksSettings.from_env(os.environ)).pipeline_resources()

Nothing here reads the environment at import time; `build` is called when a run starts.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    capacity_type: str = "ON_DEMAND"  # ON_DEMAND | SPOT | CAPACITY_BLOCK
    capacity_reservation_id: str | None = None
    expose: str = "load_balancer"  # how the pipeline's load generator reaches the engine
    source_ranges: tuple[str, ...] = ()  # CIDRs allowed to reach the load balancer
    lb_scheme: str = "internal"  # run the pipeline inside the VPC; internet-facing otherwise
    endpoint_url: str | None = None  # tests only (moto)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> EksSettings:
        """From SERVINGBENCH_EKS_* variables (read when the definitions load, never at
        import); a missing required one is a clear error naming it."""
        def need(name: str) -> str:
            value = env.get(f"SERVINGBENCH_EKS_{name}")
            if not value:
                raise ValueError(f"the eks profile needs SERVINGBENCH_EKS_{name} (see docs/eks.md)")
            return value

        def split(name: str) -> tuple[str, ...]:
            return tuple(x.strip() for x in env.get(f"SERVINGBENCH_EKS_{name}", "").split(",")
                         if x.strip())

        return cls(cluster_name=need("CLUSTER"), region=need("REGION"),
                   node_role_arn=need("NODE_ROLE_ARN"), subnet_ids=split("SUBNETS"),
                   capacity_type=env.get("SERVINGBENCH_EKS_CAPACITY_TYPE", "ON_DEMAND"),
                   capacity_reservation_id=env.get("SERVINGBENCH_EKS_CAPACITY_RESERVATION_ID") or None,
                   expose=env.get("SERVINGBENCH_EKS_EXPOSE", "load_balancer"),
                   source_ranges=split("SOURCE_RANGES"),
                   lb_scheme=env.get("SERVINGBENCH_EKS_LB_SCHEME", "internal"))


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

    def pipeline_resources(self) -> dict:
        """`cluster`, `model_server` and `bill_source` for pipelines/profiles.py."""
        from resources.eks_adapters import CostExplorerBill, EksNodegroupCluster, KubeModelServer

        s = self.settings
        return {
            "cluster": EksNodegroupCluster(self.cluster, capacity_type=s.capacity_type,
                                           capacity_reservation_id=s.capacity_reservation_id,
                                           timeout_s=s.provision_timeout_s),
            "model_server": KubeModelServer(self.kube, expose=s.expose,
                                            source_ranges=s.source_ranges,
                                            lb_scheme=s.lb_scheme, timeout_s=s.deploy_timeout_s),
            "bill_source": CostExplorerBill(self.billing),
        }

    def kube(self) -> KubeClient:
        """A Kubernetes client for the cluster (endpoint and CA from DescribeCluster)."""
        s = self.settings
        token = TokenSource.for_eks(self.session, s.cluster_name, s.region,
                                    sts_url=s.endpoint_url)
        return KubeClient.for_eks(self.cluster.describe_cluster(), token, namespace=s.namespace)
