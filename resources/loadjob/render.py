"""The Indexed Job that runs the load generator as N pods, one worker each.

Every pod runs `servingbench loadpod`: the load generator, configured by the run's
`load_config.json` under the run's S3 prefix, as worker `pod-<index>` of N
(its index from JOB_COMPLETION_INDEX, which Kubernetes sets in an Indexed Job), starting at
one absolute instant rendered into the spec, then uploads its shards to the run's S3
prefix. The pod is locked down like the engine's: non-root (the project image's uid),
read-only root filesystem, every capability dropped, seccomp RuntimeDefault, no
Kubernetes API token. It reaches S3 through IRSA: a dedicated service account whose role
only writes the run prefix (the web-identity token EKS injects is a projected volume of
its own, not the API token automountServiceAccountToken controls).

It never shares a node with the engine (required pod anti-affinity on the engine pods'
label): a client on the engine's node steals the CPU it measures.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from servingbench.resources.contract import settings
from servingbench.resources.contract.scope import nodegroup_name
from servingbench.resources.loadgen.config_file import CONFIG_FILE
from servingbench.resources.model_server.kube.render import (
    DIGEST,
    LABEL_VALUE,
    LOADGEN_LABELS,
    NODEGROUP_LABEL,
    container_security,
    key_secret,
    to_yaml,
)

__all__ = ["LoadJobSpec", "render", "api_key_secret", "to_yaml", "job_name", "KEY_ENV",
           "ENGINE_LABELS", "LABEL_VALUE"]

ENGINE_LABELS = {"app.kubernetes.io/name": "servingbench-engine"}
KEY_ENV = settings.setting("SERVINGBENCH_ENGINE_API_KEY").name  # in the pod, from its Secret
UID = 10001                               # the Dockerfile's user
SCRATCH = "/scratch"
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True)
class LoadJobSpec:
    run_id: str
    pods: int
    image: str                      # the project's image, repo@sha256:<64 hex>
    upload_uri: str                 # s3://bucket/prefix/runs/<run_id>
    start_at: str                   # the barrier, an RFC 3339 UTC instant
    namespace: str = "servingbench"
    owner: str | None = None
    service_account: str | None = None   # IRSA identity for S3; None: the namespace default
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[tuple[str, str | None, str], ...] = ()   # (key, value or None, effect)
    cpu: str = "1"
    memory_gib: int = 2
    deadline_s: int = 3 * 3600      # the Job's activeDeadlineSeconds: no pod outlives it
    ttl_s: int = 3600               # finished Jobs vanish even if nobody deletes them
    api_key: bool = False           # the engine needs a key: mounted from the Job's Secret
    env: tuple[tuple[str, str], ...] = ()   # AWS_REGION, AWS_ENDPOINT_URL_S3 (no secret here)

    def __post_init__(self) -> None:
        if not 1 <= self.pods <= 10_000:
            raise ValueError(f"load pods must be between 1 and 10000, got {self.pods}")
        if not DIGEST.match(self.image):
            raise ValueError(f"load image {self.image!r} must be pinned by digest "
                             "(repo@sha256:<64 hex>)")
        if not self.upload_uri.startswith("s3://"):
            raise ValueError(f"upload_uri {self.upload_uri!r}: expected s3://bucket/prefix/...")
        for key, _value, effect in self.tolerations:
            if effect not in EFFECTS:
                raise ValueError(f"toleration {key}: effect {effect!r} is not one of {EFFECTS}")
        if self.deadline_s < 60 or self.ttl_s < 0:
            raise ValueError("deadline_s must be >= 60 and ttl_s >= 0")

    @property
    def name(self) -> str:
        return job_name(self.run_id)

    @property
    def secret_name(self) -> str:
        return f"{self.name}-key"


def job_name(run_id: str) -> str:
    """A DNS-1123 label short enough for `<job>-<index>` pod host names, unique per run
    (a digest of the whole run id: the readable part may be cut)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", run_id.lower()).strip("-")[:36].strip("-")
    return f"sb-load-{slug}-{hashlib.sha256(run_id.encode()).hexdigest()[:6]}"


def labels(s: LoadJobSpec) -> dict[str, str]:
    # the node-group label is the reaper's proof that an object belongs to a run (with the
    # run-id annotation): without it an orphaned Job or key Secret is never removed
    out = {**LOADGEN_LABELS, "app.kubernetes.io/instance": s.name,
           "servingbench/run-id": LABEL_VALUE.sub("-", s.run_id)[:63].strip("-._"),
           NODEGROUP_LABEL: nodegroup_name(s.run_id)}
    if s.owner:
        out["servingbench/owner"] = s.owner
    return out


def api_key_secret(s: LoadJobSpec, key: str) -> dict:
    """The engine's API key for the pods (applied, never written to a file or a log)."""
    return key_secret(s.secret_name, s.namespace, labels(s), s.run_id, key)


def pod_args(s: LoadJobSpec) -> list[str]:
    """What to run comes from the run's load config under `upload_uri` (CONFIG_FILE, written
    by the pipeline before the Job); the flags say only which worker of how many, and when."""
    return ["loadpod", "--upload", s.upload_uri, "--scratch", f"{SCRATCH}/run",
            "--config", CONFIG_FILE, "--", "--no-progress",
            "--worker-index", "env", "--worker-count", str(s.pods), "--start-at", s.start_at]


def _container(s: LoadJobSpec) -> dict:
    env = [{"name": k, "value": v} for k, v in s.env]
    env.append({"name": "TMPDIR", "value": f"{SCRATCH}/tmp"})
    if s.api_key:
        env.append({"name": KEY_ENV, "valueFrom": {"secretKeyRef": {
            "name": s.secret_name, "key": "key"}}})
    return {
        "name": "load", "image": s.image, "imagePullPolicy": "IfNotPresent",
        "command": ["servingbench"], "args": pod_args(s), "env": env,
        # no CPU limit: CFS throttling would stall the event loop mid-stream and show up as
        # latency; the request reserves the core, the self-watch reports a starved client
        "resources": {"requests": {"cpu": s.cpu, "memory": f"{s.memory_gib}Gi"},
                      "limits": {"memory": f"{s.memory_gib}Gi"}},
        "securityContext": container_security(UID, read_only_root=True),
        # a failed pod's last log lines become its termination message: the manifest's reason
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": "scratch", "mountPath": SCRATCH}],
    }


def render(s: LoadJobSpec) -> dict:
    """The batch/v1 Job: Indexed, N completions all in parallel, no retry of a failed index
    (a retried worker would re-send its share late and skew the step), bounded in time."""
    meta = {"name": s.name, "namespace": s.namespace, "labels": labels(s),
            "annotations": {"servingbench/run-id": s.run_id,
                            "servingbench/start-at": s.start_at}}
    pod: dict = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID,
                            "fsGroup": UID, "seccompProfile": {"type": "RuntimeDefault"}},
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": dict(ENGINE_LABELS)},
            "topologyKey": "kubernetes.io/hostname"}]}},
        "terminationGracePeriodSeconds": 30,
        "containers": [_container(s)],
        "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "4Gi"}}],
    }
    if s.service_account:
        pod["serviceAccountName"] = s.service_account
    if s.node_selector:
        pod["nodeSelector"] = dict(s.node_selector)
    if s.tolerations:
        pod["tolerations"] = [
            {"key": k, "operator": "Equal", "value": v, "effect": e} if v is not None
            else {"key": k, "operator": "Exists", "effect": e} for k, v, e in s.tolerations]
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
        "spec": {
            "completionMode": "Indexed", "completions": s.pods, "parallelism": s.pods,
            "backoffLimitPerIndex": 0,
            "activeDeadlineSeconds": s.deadline_s,
            "ttlSecondsAfterFinished": s.ttl_s,
            "template": {"metadata": {"labels": labels(s),
                                      "annotations": dict(meta["annotations"])},
                         "spec": pod},
        },
    }
