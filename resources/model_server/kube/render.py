"""Deployment + Service + NetworkPolicy manifests for one candidate: any engine of
model_server/engines/ that runs on Kubernetes (vLLM on GPU, SGLang on GPU, vLLM on Neuron),
which gives its command, arguments and environment. Plain dicts (the API's JSON); `to_yaml` gives the stable text the golden
files hold.

Images are pinned by digest (a tag can move under a benchmark). The Hugging Face token
comes from the Secret `hf-token` (key `token`) by reference; the engine's API key from the
per-run Secret `api_key_secret` builds (applied by the deployment, never rendered to a file),
through a variable or a mounted config file, never an argument.

The pod is locked down: no service-account token, no privilege escalation, every
capability dropped, seccomp RuntimeDefault, and only the load generator's source ranges
admitted by the NetworkPolicy. It runs as root unless `run_as_user` is set: the vLLM,
SGLang and Neuron images are built to run as root (their caches live under /root), so
non-root is a per-engine choice for an image known to support it. The root filesystem
stays writable for the same reason (the engines write caches and compiled kernels).
"""

from __future__ import annotations

import copy
import ipaddress
import json
import re
from dataclasses import dataclass, field

import yaml
from servingbench.resources.model_server import engines

DIGEST = re.compile(r"^[a-z0-9][^@\s]*@sha256:[0-9a-f]{64}$")
LABEL_VALUE = re.compile(r"[^A-Za-z0-9._-]")
PORT = 8000
KEY_DIR, KEY_CONFIG = "/etc/servingbench/engine-key", "engine.yaml"  # the mounted config file
API_KEY_ENV = "ENGINE_API_KEY"  # in the container; expanded into --api-key by Kubernetes
LOADGEN_LABELS = {"app.kubernetes.io/name": "servingbench-loadgen"}  # an in-cluster load Job
# the run's pod, where the swap driver of several models runs (deploy/values.yaml labels the
# Dagster run pods so): the only source a swapped model's dev-mode endpoints admit
SWAP_DRIVER_LABELS = {"servingbench/role": "swap-driver"}


@dataclass(frozen=True)
class EngineSpec:
    """What the engine container needs. `devices` is GPUs or Neuron devices per pod."""

    run_id: str
    candidate: str
    nodegroup: str
    engine: str  # the server program: vllm | sglang (an engine's `family`)
    accelerator: str  # nvidia | neuron
    image: str  # repo@sha256:<64 hex>
    model: str
    tensor_parallel: int
    devices: int
    max_model_len: int
    expert_parallel: bool = False
    quantization: str | None = None
    shm_gib: int = 64
    cpu: str = "32"
    memory_gib: int = 512
    startup_timeout_s: int = 3600  # weights load + compile; Neuron compiles take long
    neuron_config: dict = field(default_factory=dict)  # vLLM --override-neuron-config
    # swept engine settings by their common name (max_num_batched_tokens, speculative, ...);
    # the engine's file spells them (engines/<engine>.py SETTINGS)
    settings: dict = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()
    namespace: str = "servingbench"
    # How the load generator reaches the engine: "cluster_ip" (an in-cluster Job) or
    # "load_balancer" (an NLB, only from `source_ranges`; "internal" scheme inside the VPC).
    expose: str = "cluster_ip"
    source_ranges: tuple[str, ...] = ()
    lb_scheme: str = "internal"  # internal | internet-facing
    # An internet-facing load balancer, or any source range that is not wholly private, only
    # with this explicit consent (SERVINGBENCH_EKS_ALLOW_PUBLIC=plaintext-api-key: the key
    # travels as a plain-HTTP bearer token).
    allow_public: bool = False
    owner: str | None = None  # the installation id (label, load balancer tag)
    run_as_user: int | None = None  # None: the image's user (root for the stock engines)

    def __post_init__(self) -> None:
        engines.on_kubernetes(self.engine, self.accelerator)  # ValueError if none runs there
        self.runtime.setting_args(self.swept)  # ValueError for a setting it does not have
        if not DIGEST.match(self.image):
            raise ValueError(f"image {self.image!r} must be pinned by digest (repo@sha256:<64 hex>)")
        if self.tensor_parallel < 1 or self.devices < 1 or self.max_model_len < 1:
            raise ValueError("tensor_parallel, devices and max_model_len must be >= 1")
        if self.expose not in ("cluster_ip", "load_balancer"):
            raise ValueError(f"expose must be cluster_ip or load_balancer, got {self.expose!r}")
        if self.expose == "load_balancer" and not self.source_ranges:
            raise ValueError("expose=load_balancer needs source_ranges (the load generator's "
                             "CIDRs): an engine endpoint is never open to everyone")
        if self.lb_scheme not in ("internal", "internet-facing"):
            raise ValueError(f"lb_scheme must be internal or internet-facing, got {self.lb_scheme!r}")
        for cidr in self.source_ranges:
            try:
                net = ipaddress.ip_network(cidr)
            except ValueError:
                raise ValueError(f"source_ranges: {cidr!r} is not a CIDR") from None
            if not net.is_private and not self.allow_public:
                raise ValueError(f"source_ranges: {cidr} is not a private range (the engine's "
                                 "API key crosses it as plain HTTP); refused unless allow_public "
                                 "(SERVINGBENCH_EKS_ALLOW_PUBLIC=plaintext-api-key)")
        if self.lb_scheme == "internet-facing" and not self.allow_public:
            raise ValueError("lb_scheme internet-facing is refused unless allow_public "
                             "(SERVINGBENCH_EKS_ALLOW_PUBLIC=plaintext-api-key)")
        if self.run_as_user is not None and self.run_as_user < 1:
            raise ValueError(f"run_as_user must be a non-root uid (>= 1), got {self.run_as_user}")

    @property
    def name(self) -> str:
        """A DNS-1035 label (lowercase, ≤ 63): valid for Deployment and Service."""
        return re.sub(r"[^a-z0-9-]", "-", f"{self.nodegroup}-{self.engine}".lower())[:63].strip("-")

    @property
    def api_key_secret(self) -> str:
        return f"{self.name[:55].rstrip('-')}-api-key"

    @property
    def runtime(self) -> engines.Engine:
        """The engine this spec runs (engines/<engine>.py)."""
        return engines.on_kubernetes(self.engine, self.accelerator)

    @property
    def port(self) -> int:
        return PORT

    @property
    def api_key_ref(self) -> str:
        """The API key argument: the container's variable, expanded by Kubernetes."""
        return f"$({API_KEY_ENV})"

    @property
    def api_key_config(self) -> str:
        """The engine's config file holding its key (an engine with `api_key_option`)."""
        return f"{KEY_DIR}/{KEY_CONFIG}"

    @property
    def swept(self) -> dict:
        """Every setting the engine is launched with, by its common name, in launch order."""
        return {"quantization": self.quantization, **self.settings}


def _container(s: EngineSpec) -> dict:
    engine = s.runtime
    command, args = list(engine.command), engine.launch(s)
    device = "nvidia.com/gpu" if s.accelerator == "nvidia" else "aws.amazon.com/neuron"
    limits = {device: str(s.devices), "cpu": s.cpu, "memory": f"{s.memory_gib}Gi"}
    env = [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": "hf-token", "key": "token", "optional": True}}},
        {"name": engine.api_key_env or API_KEY_ENV, "valueFrom": {"secretKeyRef": {
            "name": s.api_key_secret, "key": "key"}}},
        {"name": "HF_HOME", "value": "/models/hf"}]
    env += [dict(e) for e in engine.env]
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "models", "mountPath": "/models"}]
    if engine.api_key_option:
        mounts.append({"name": "engine-key", "mountPath": KEY_DIR, "readOnly": True})
    period = 10
    return {
        "name": "engine", "image": s.image, "imagePullPolicy": "IfNotPresent",
        "command": command, "args": args, "env": env,
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "resources": {"requests": dict(limits), "limits": dict(limits)},
        "securityContext": container_security(s.run_as_user),
        "volumeMounts": mounts,
        "startupProbe": {"httpGet": {"path": "/health", "port": "http"},
                         "periodSeconds": period, "failureThreshold": s.startup_timeout_s // period},
        # /health, not /v1/models: the /v1 routes need the API key, a probe cannot send it
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"},
                           "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": "/health", "port": "http"},
                          "periodSeconds": 15, "failureThreshold": 4},
    }


def container_security(uid: int | None, read_only_root: bool = False) -> dict:
    """A locked-down container (the engine's, the load pods'): no privilege escalation, not
    privileged, every capability dropped; non-root as `uid` where the image's user is known
    (an engine image's may not be), and a read-only root filesystem where the image needs
    no writes outside its volumes."""
    sc: dict = {"allowPrivilegeEscalation": False, "privileged": False,
                "capabilities": {"drop": ["ALL"]}}
    if read_only_root:
        sc["readOnlyRootFilesystem"] = True
    if uid is not None:
        sc.update(runAsNonRoot=True, runAsUser=uid, runAsGroup=uid)
    return sc


OWNER_LABEL = "servingbench/owner"
# The run's node group name (`sb-` + the run id's slug + its hash, ≤ 63 characters): what
# the reaper matches a run's objects by, as it matches the node group itself.
NODEGROUP_LABEL = "servingbench/nodegroup"
RUN_ANNOTATION = "servingbench/run-id"


def labels(s: EngineSpec) -> dict[str, str]:
    out = {"app.kubernetes.io/name": "servingbench-engine",
           "app.kubernetes.io/instance": s.name,
           "servingbench/candidate": LABEL_VALUE.sub("-", s.candidate)[:63].strip("-._"),
           NODEGROUP_LABEL: s.nodegroup}
    if s.owner:
        out[OWNER_LABEL] = s.owner
    return out


def api_key_secret(s: EngineSpec, key: str) -> dict:
    """The per-run Secret holding the engine's API key (applied, never written to a file);
    for an engine that reads it from its config file, that file too (`option: "KEY"`, the
    key as a JSON string, which YAML reads as the same string)."""
    secret = key_secret(s.api_key_secret, s.namespace, labels(s), s.run_id, key)
    option = s.runtime.api_key_option
    if option:
        secret["stringData"][KEY_CONFIG] = f"{option}: {json.dumps(key)}\n"
    return secret


def key_secret(name: str, namespace: str, labels: dict[str, str], run_id: str, key: str) -> dict:
    """A run's Secret holding one key under `key` (the engine's, the load pods' copy of it)."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace, "labels": labels,
                         "annotations": {RUN_ANNOTATION: run_id}},
            "stringData": {"key": key}}


def network_policy(s: EngineSpec) -> dict:
    """Ingress to the engine port only from the load generator: its CIDRs behind a load
    balancer (the NLB keeps the client's address), or its pods for an in-cluster Job."""
    if s.expose == "load_balancer":
        peers = [{"ipBlock": {"cidr": c}} for c in s.source_ranges]
    else:
        peers = [{"podSelector": {"matchLabels": dict(LOADGEN_LABELS)}}]
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": s.name, "namespace": s.namespace, "labels": labels(s),
                         "annotations": {"servingbench/run-id": s.run_id}},
            "spec": {"podSelector": {"matchLabels": {"app.kubernetes.io/instance": s.name}},
                     "policyTypes": ["Ingress"],
                     "ingress": [{"from": peers, "ports": [{"port": PORT, "protocol": "TCP"}]}]}}


def render(s: EngineSpec) -> list[dict]:
    """[Deployment, Service, NetworkPolicy] for the candidate, pinned to its node group."""
    meta = {"name": s.name, "namespace": s.namespace, "labels": labels(s),
            "annotations": {"servingbench/run-id": s.run_id, "servingbench/engine": s.engine}}
    selector = {"app.kubernetes.io/instance": s.name}
    taint = "nvidia.com/gpu" if s.accelerator == "nvidia" else "aws.amazon.com/neuron"
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
        "spec": {
            "replicas": 1, "selector": {"matchLabels": selector},
            "strategy": {"type": "Recreate"},
            "template": {
                "metadata": {"labels": labels(s), "annotations": dict(meta["annotations"])},
                "spec": {
                    "automountServiceAccountToken": False,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "nodeSelector": {"eks.amazonaws.com/nodegroup": s.nodegroup},
                    "tolerations": [{"key": taint, "operator": "Exists", "effect": "NoSchedule"}],
                    "terminationGracePeriodSeconds": 30,
                    "containers": [_container(s)],
                    "volumes": [
                        {"name": "dshm", "emptyDir": {"medium": "Memory",
                                                      "sizeLimit": f"{s.shm_gib}Gi"}},
                        {"name": "models", "emptyDir": {}},
                        *([{"name": "engine-key", "secret": {
                            "secretName": s.api_key_secret, "defaultMode": 0o400,
                            "items": [{"key": KEY_CONFIG, "path": KEY_CONFIG}]}}]
                          if s.runtime.api_key_option else []),
                    ],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": copy.deepcopy(meta),
        "spec": {"type": "ClusterIP", "selector": dict(selector),
                 "ports": [{"name": "http", "port": PORT, "targetPort": "http"}]},
    }
    if s.expose == "load_balancer":
        service["metadata"]["annotations"].update({
            "service.beta.kubernetes.io/aws-load-balancer-type": "external",
            "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip",
            "service.beta.kubernetes.io/aws-load-balancer-scheme": s.lb_scheme,
            # the NetworkPolicy admits the load generator by its own address
            "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes":
                "preserve_client_ip.enabled=true",
            "service.beta.kubernetes.io/aws-load-balancer-additional-resource-tags":
                f"servingbench:run-id={s.run_id}"
                + (f",servingbench:owner={s.owner}" if s.owner else "")})
        service["spec"].update(type="LoadBalancer", loadBalancerSourceRanges=list(s.source_ranges))
    return [deployment, service, network_policy(s)]


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: object) -> bool:  # never &id001 anchors in manifests
        return True


def to_yaml(objects: list[dict]) -> str:
    """Stable multi-document YAML (key order as built) for golden files and kubectl."""
    return "---\n".join(yaml.dump(o, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
                        for o in objects)
