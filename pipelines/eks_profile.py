"""The eks profile's settings and wiring: real EKS node groups, Kubernetes deployments,
Cost Explorer bills, configured by SERVINGBENCH_EKS_* (docs/eks.md). Built when a run needs
them; no AWS call is made until a run starts. pipelines/resources.py shows them in Dagster
(EnvVar config), pipelines/profiles.py picks them for the eks profile, `servingbench eks`
uses them directly."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servingbench.resources import billing
from servingbench.resources.aws.caller import Caller
from servingbench.resources.billing.cost_explorer import CostExplorerApi
from servingbench.resources.billing.price_list import PriceListApi
from servingbench.resources.cluster.eks import EksNodegroupCluster
from servingbench.resources.cluster.eks_api import HEARTBEAT_STALE_S, EksNodegroups, check_owner
from servingbench.resources.cluster.reaper import EksReaper
from servingbench.resources.contract import settings as envvars
from servingbench.resources.contract.digits import is_digits
from servingbench.resources.model_server import engines
from servingbench.resources.model_server.kube.client import KubeClient
from servingbench.resources.model_server.kube.reap import KubeRunObjects
from servingbench.resources.model_server.kube.server import KubeModelServer
from servingbench.resources.model_server.kube.token import TokenSource

# the bill source the eks profile bills with, by its name (resources/billing finds the file
# that defines it): the run's Cost Explorer bill
BILL_SOURCE = "cost_explorer"


@dataclass(frozen=True)
class EksSettings:
    cluster_name: str
    region: str
    node_role_arn: str
    owner: str  # this installation's id, tagged on every resource it creates
    subnet_ids: tuple[str, ...] = ()  # empty: the cluster's own subnets
    namespace: str = "servingbench"
    reaper_ttl_hours: float = 6.0
    provision_timeout_s: float = 1800.0
    deploy_timeout_s: float = 3600.0
    capacity_type: str = envvars.default("SERVINGBENCH_EKS_CAPACITY_TYPE")
    capacity_reservation_id: str | None = None
    fis_role_arn: str | None = None  # a spot candidate's interruptions (docs/spot.md)
    expose: str = envvars.default("SERVINGBENCH_EKS_EXPOSE")  # how the load reaches the engine
    source_ranges: tuple[str, ...] = ()  # CIDRs allowed to reach the load balancer
    lb_scheme: str = envvars.default("SERVINGBENCH_EKS_LB_SCHEME")  # internal: inside the VPC
    allow_public: bool = False  # consent to 0.0.0.0/0 or an internet-facing load balancer
    run_as_user: int | None = None  # engines run as this non-root uid (image must allow it)
    # where the Dagster run pods run: a swapped model admits its swap driver from there alone
    run_namespace: str = envvars.default("SERVINGBENCH_EKS_RUN_NAMESPACE")
    endpoint_url: str | None = None  # tests only (moto)
    kube_url: str | None = None  # tests only (the fake Kubernetes API): no DescribeCluster
    dcgm_url: str | None = None  # the engine node's dcgm-exporter /metrics (docs/telemetry.md)
    neuron_monitor_url: str | None = None  # the neuron-monitor reader's report (deploy/)
    # the load generator as an Indexed Job (resources/loadjob/): 0 pods = in the run's process
    load_pods: int = 0
    load_image: str | None = None          # the project's image, repo@sha256:…
    load_node_selector: tuple[tuple[str, str], ...] = ()   # the CPU node group of the load
    load_tolerations: tuple[tuple[str, str | None, str], ...] = ()
    load_service_account: str | None = envvars.default("SERVINGBENCH_EKS_LOAD_SERVICE_ACCOUNT")
    load_cpu: str = envvars.default("SERVINGBENCH_EKS_LOAD_CPU")  # one worker per pod
    # the barrier: scheduling and image pull before it
    load_start_delay_s: float = float(envvars.default("SERVINGBENCH_EKS_LOAD_START_DELAY_S"))

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> EksSettings:
        """From SERVINGBENCH_EKS_* variables (read when the definitions load, never at
        import); a missing required one is a clear error naming it."""
        def need(name: str) -> str:
            value = envvars.get(name, env)
            if not value:
                raise ValueError(f"the eks profile needs {name} (see docs/eks.md)")
            return value

        def split(name: str) -> tuple[str, ...]:
            return tuple(x.strip() for x in (envvars.get(name, env) or "").split(",")
                         if x.strip())

        def get(name: str) -> str | None:
            return envvars.get(name, env)

        allow_public = _public_consent(env)
        source_ranges = split("SERVINGBENCH_EKS_SOURCE_RANGES")
        lb_scheme = get("SERVINGBENCH_EKS_LB_SCHEME")
        _check_exposure(source_ranges, lb_scheme, allow_public)
        return cls(cluster_name=need("SERVINGBENCH_EKS_CLUSTER"),
                   region=need("SERVINGBENCH_EKS_REGION"),
                   node_role_arn=need("SERVINGBENCH_EKS_NODE_ROLE_ARN"), owner=owner_from_env(env),
                   subnet_ids=split("SERVINGBENCH_EKS_SUBNETS"),
                   capacity_type=get("SERVINGBENCH_EKS_CAPACITY_TYPE"),
                   capacity_reservation_id=get("SERVINGBENCH_EKS_CAPACITY_RESERVATION_ID"),
                   fis_role_arn=get("SERVINGBENCH_EKS_FIS_ROLE_ARN"),
                   expose=get("SERVINGBENCH_EKS_EXPOSE"),
                   source_ranges=source_ranges, lb_scheme=lb_scheme, allow_public=allow_public,
                   run_as_user=_uid(env, "SERVINGBENCH_EKS_RUN_AS_USER"),
                   run_namespace=_dns_label(env, "SERVINGBENCH_EKS_RUN_NAMESPACE"),
                   dcgm_url=get("SERVINGBENCH_EKS_DCGM_URL"),
                   neuron_monitor_url=get("SERVINGBENCH_EKS_NEURON_MONITOR_URL"),
                   **_load_settings(env))

    def telemetry(self) -> tuple[dict, ...]:
        """What the sampler reads beside the engine's own /metrics (docs/telemetry.md)."""
        return tuple([{"kind": "dcgm", "url": self.dcgm_url}] * bool(self.dcgm_url)
                     + [{"kind": "neuron_monitor", "url": self.neuron_monitor_url}]
                     * bool(self.neuron_monitor_url))


def _load_settings(env: Mapping[str, str]) -> dict:
    """SERVINGBENCH_EKS_LOAD_*: the load pods' count, image, placement and size."""
    def text(name: str) -> str:
        return (envvars.get(name, env) or "").strip()

    pods = text("SERVINGBENCH_EKS_LOAD_PODS") or envvars.default("SERVINGBENCH_EKS_LOAD_PODS")
    if not is_digits(pods) or int(pods) > 10_000:
        raise ValueError(f"SERVINGBENCH_EKS_LOAD_PODS={pods!r}: expected a pod count 0..10000")
    selector = []
    for part in filter(None, (x.strip() for x in text("SERVINGBENCH_EKS_LOAD_NODE_SELECTOR").split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise ValueError(f"SERVINGBENCH_EKS_LOAD_NODE_SELECTOR: {part!r}: expected KEY=VALUE")
        selector.append((key, value))
    tolerations = []
    for part in filter(None, (x.strip() for x in text("SERVINGBENCH_EKS_LOAD_TOLERATIONS").split(","))):
        kv, sep, effect = part.rpartition(":")
        key, eq, value = kv.partition("=")
        if not sep or not key or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise ValueError(f"SERVINGBENCH_EKS_LOAD_TOLERATIONS: {part!r}: expected "
                             "KEY[=VALUE]:NoSchedule|PreferNoSchedule|NoExecute")
        tolerations.append((key, value if eq else None, effect))
    delay = (text("SERVINGBENCH_EKS_LOAD_START_DELAY_S")
             or envvars.default("SERVINGBENCH_EKS_LOAD_START_DELAY_S"))
    try:
        delay_s = float(delay)
    except ValueError:
        delay_s = -1.0
    if not 0 <= delay_s <= 3600:
        raise ValueError(f"SERVINGBENCH_EKS_LOAD_START_DELAY_S={delay!r}: expected seconds 0..3600")
    image = text("SERVINGBENCH_EKS_LOAD_IMAGE") or None
    if image and "@sha256:" not in image:
        raise ValueError(f"SERVINGBENCH_EKS_LOAD_IMAGE={image!r}: pin it by digest (repo@sha256:…)")
    return {"load_pods": int(pods), "load_image": image,
            "load_node_selector": tuple(selector), "load_tolerations": tuple(tolerations),
            "load_service_account": text("SERVINGBENCH_EKS_LOAD_SERVICE_ACCOUNT")
            or envvars.default("SERVINGBENCH_EKS_LOAD_SERVICE_ACCOUNT"),
            "load_cpu": text("SERVINGBENCH_EKS_LOAD_CPU") or envvars.default("SERVINGBENCH_EKS_LOAD_CPU"),
            "load_start_delay_s": delay_s}


def owner_from_env(env: Mapping[str, str]) -> str:
    """SERVINGBENCH_EKS_OWNER: the id chosen at setup that names this installation; the
    reaper of this installation touches nothing tagged with another one."""
    value = envvars.get("SERVINGBENCH_EKS_OWNER", env)
    if not value:
        raise ValueError("the eks profile needs SERVINGBENCH_EKS_OWNER, the id of this "
                         "installation tagged on everything it creates (see docs/eks.md)")
    return check_owner(value, "SERVINGBENCH_EKS_OWNER")


def _uid(env: Mapping[str, str], name: str) -> int | None:
    value = envvars.get(name, env) or ""
    if not value:
        return None
    if not is_digits(value) or int(value) < 1:
        raise ValueError(f"{name}={value!r}: expected a non-root uid (an integer >= 1)")
    return int(value)


# The consent value names the risk it accepts: the load balancer has no TLS listener, so the
# engine's API key crosses the network as a plain-HTTP bearer token.
PUBLIC_CONSENT = "plaintext-api-key"
_CONSENT = (f"set SERVINGBENCH_EKS_ALLOW_PUBLIC={PUBLIC_CONSENT} to accept that the engine's API "
            "key then crosses the internet as a plain-HTTP bearer token (a candidate with "
            "swapped models stays refused even so: their engines run in development mode, "
            f"whose {', '.join(engines.sleep_mode().dev_endpoints)} take no key)")


def _dns_label(env: Mapping[str, str], name: str) -> str:
    value = envvars.get(name, env) or envvars.default(name)
    if not re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", value):
        raise ValueError(f"{name}={value!r}: expected a Kubernetes namespace name")
    return value


def _public_consent(env: Mapping[str, str]) -> bool:
    value = envvars.get("SERVINGBENCH_EKS_ALLOW_PUBLIC", env) or ""
    if value in ("", "0"):
        return False
    if value != PUBLIC_CONSENT:
        raise ValueError(f"SERVINGBENCH_EKS_ALLOW_PUBLIC={value!r}: the consent must name the risk "
                         f"it accepts: {PUBLIC_CONSENT} (the load balancer serves plain HTTP, so "
                         "the engine's API key is readable on the way)")
    return True


def _check_exposure(source_ranges: tuple[str, ...], lb_scheme: str, allow_public: bool) -> None:
    """An engine reachable from outside private address space only by explicit consent,
    named in the message: any range that is not wholly private (not only /0: 0.0.0.0/1 and
    128.0.0.0/1 together are everyone too), or an internet-facing load balancer."""
    for cidr in source_ranges:
        try:
            net = ipaddress.ip_network(cidr)
        except ValueError:
            raise ValueError(f"SERVINGBENCH_EKS_SOURCE_RANGES: {cidr!r} is not a CIDR") from None
        if not net.is_private and not allow_public:
            raise ValueError(f"SERVINGBENCH_EKS_SOURCE_RANGES={cidr} is not a private range: it "
                             f"opens the engine beyond the VPC; {_CONSENT}")
    if lb_scheme == "internet-facing" and not allow_public:
        raise ValueError("SERVINGBENCH_EKS_LB_SCHEME=internet-facing puts the engine on the "
                         f"internet; {_CONSENT}")


@dataclass
class EksResources:
    settings: EksSettings
    session: Any
    cluster: EksNodegroups
    billing: CostExplorerApi
    price_list: PriceListApi
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
            cluster=EksNodegroups(session, s.cluster_name, s.region, node_role_arn=s.node_role_arn,
                               owner=s.owner, subnet_ids=list(s.subnet_ids) or None,
                               endpoint_url=s.endpoint_url, caller=caller),
            billing=CostExplorerApi(session, endpoint_url=s.endpoint_url, caller=caller),
            price_list=PriceListApi.from_session(session, endpoint_url=s.endpoint_url,
                                                     caller=caller),
        )

    def pipeline_resources(self) -> dict:
        """The eks `cluster`, `model_server` and `bill_source` resources."""
        s = self.settings
        return {
            "cluster": EksNodegroupCluster(self.cluster, capacity_type=s.capacity_type,
                                           capacity_reservation_id=s.capacity_reservation_id,
                                           timeout_s=s.provision_timeout_s),
            "model_server": KubeModelServer(self.kube, expose=s.expose,
                                            source_ranges=s.source_ranges,
                                            lb_scheme=s.lb_scheme, allow_public=s.allow_public,
                                            owner=s.owner, run_as_user=s.run_as_user,
                                            timeout_s=s.deploy_timeout_s,
                                            telemetry=s.telemetry(),
                                            interruptions=self.fis(),
                                            driver_namespace=s.run_namespace),
            "bill_source": billing.build(BILL_SOURCE, billing.Aws(
                self.session, endpoint_url=s.endpoint_url, caller=self.caller)),
        }

    def fis(self):
        """What makes a spot run's FisInterruptions (None without the FIS role)."""
        s = self.settings
        if not s.fis_role_arn:
            return None
        from servingbench.resources.cluster.fis import FisInterruptions

        return lambda: FisInterruptions(self.session, s.region, role_arn=s.fis_role_arn,
                                        owner=s.owner, endpoint_url=s.endpoint_url,
                                        caller=self.caller)

    def kube(self) -> KubeClient:
        """A Kubernetes client for the cluster (endpoint and CA from DescribeCluster)."""
        s = self.settings
        token = TokenSource.for_eks(self.session, s.cluster_name, s.region,
                                    sts_url=s.endpoint_url)
        if s.kube_url:
            return KubeClient(s.kube_url, token, namespace=s.namespace)
        return KubeClient.for_eks(self.cluster.describe_cluster(), token, namespace=s.namespace)

    def reaper(self, ttl_hours: float, *, heartbeat_stale_s: float = HEARTBEAT_STALE_S,
               kubernetes: bool = True) -> EksReaper:
        """The reaper of this installation (the scheduled job's and `servingbench eks reap`'s):
        node groups and launch templates, and (`kubernetes`) the runs' Kubernetes objects,
        reached when it runs, never when it is built."""
        owner = self.settings.owner
        s = self.settings
        from servingbench.resources.cluster.fis import FisInterruptions

        # a killed spot run's experiment template: reaped whether or not spot runs are on now
        def fis() -> FisInterruptions:
            return FisInterruptions(self.session, s.region, role_arn=s.fis_role_arn or "",
                                    owner=owner, endpoint_url=s.endpoint_url, caller=self.caller)

        return EksReaper(self.cluster, ttl_hours, heartbeat_stale_s=heartbeat_stale_s,
                         objects=(lambda: KubeRunObjects(self.kube(), owner)) if kubernetes else None,
                         fis=fis)
