"""A minimal Kubernetes REST client over httpx: server-side apply, get, list, delete, logs,
and a bounded wait for a Deployment's rollout. Authenticates with a bearer token from a
callable (an EKS presigned token); the token never appears in a log, error or repr.
"""

from __future__ import annotations

import base64
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

import httpx

log = logging.getLogger("servingbench.kube")

FIELD_MANAGER = "servingbench"
# kind → (API group path, plural, namespaced)
KINDS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("api/v1", "namespaces", False),
    "Service": ("api/v1", "services", True),
    "ConfigMap": ("api/v1", "configmaps", True),
    "Secret": ("api/v1", "secrets", True),
    "NetworkPolicy": ("apis/networking.k8s.io/v1", "networkpolicies", True),
    "Pod": ("api/v1", "pods", True),
    "Event": ("api/v1", "events", True),
    "Deployment": ("apis/apps/v1", "deployments", True),
    "Job": ("apis/batch/v1", "jobs", True),
    "Node": ("api/v1", "nodes", False),
    "ScaledObject": ("apis/keda.sh/v1alpha1", "scaledobjects", True),
    "HorizontalPodAutoscaler": ("apis/autoscaling/v2", "horizontalpodautoscalers", True),
}
# Container states that no amount of waiting fixes.
FATAL_WAITING = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CrashLoopBackOff",
                 "CreateContainerConfigError", "CreateContainerError"}


class KubeError(RuntimeError):
    """A Kubernetes API call failed; carries the HTTP status and the API's own message."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class RolloutError(KubeError):
    """The Deployment did not become ready (timed out, or a pod is stuck for good)."""


class KubeClient:
    """Talks to one API server. `token` is a callable returning a bearer token."""

    def __init__(self, server: str, token: Callable[[], str], *, ca_data: str | None = None,
                 namespace: str = "servingbench", timeout_s: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic):
        verify: Any = True
        if ca_data:
            try:
                verify = ssl.create_default_context(cadata=base64.b64decode(ca_data).decode())
            except (ValueError, ssl.SSLError):
                raise KubeError("the cluster's certificateAuthority.data is not a base64 PEM "
                                "certificate") from None
        self.server, self.namespace = server.rstrip("/"), namespace
        self._token, self.sleep, self.clock = token, sleep, clock
        self.http = httpx.Client(base_url=self.server, verify=verify, timeout=timeout_s)

    @classmethod
    def for_eks(cls, cluster: dict, token: Callable[[], str], **kwargs: Any) -> KubeClient:
        """From `eks:DescribeCluster`'s `cluster` (endpoint + certificate authority)."""
        return cls(cluster["endpoint"], token,
                   ca_data=(cluster.get("certificateAuthority") or {}).get("data"), **kwargs)

    def __repr__(self) -> str:
        return f"KubeClient({self.server!r}, namespace={self.namespace!r})"

    def close(self) -> None:
        self.http.close()

    # -- paths and requests ----------------------------------------------------------
    def path(self, kind: str, name: str | None = None, namespace: str | None = None) -> str:
        if kind not in KINDS:
            raise KubeError(f"kind {kind!r} not supported (known: {', '.join(KINDS)})")
        group, plural, namespaced = KINDS[kind]
        ns = f"/namespaces/{namespace or self.namespace}" if namespaced else ""
        return f"/{group}{ns}/{plural}" + (f"/{name}" if name else "")

    def request(self, method: str, path: str, *, ok_missing: bool = False, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {self._token()}", "Accept": "application/json",
                   **kwargs.pop("headers", {})}
        try:
            r = self.http.request(method, path, headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise KubeError(f"{method} {path}: {type(exc).__name__}") from None
        if r.status_code == 404 and ok_missing:
            return None
        if r.status_code >= 400:
            try:
                message = r.json().get("message", "")
            except ValueError:
                message = r.text[:200]
            hint = " (token rejected: check the IAM identity's cluster access entry)" \
                if r.status_code in (401, 403) else ""
            raise KubeError(f"{method} {path}: HTTP {r.status_code}: {message}{hint}", r.status_code)
        if r.headers.get("content-type", "").startswith("application/json"):
            return r.json()
        return r.text

    # -- verbs -----------------------------------------------------------------------
    def apply(self, obj: dict) -> dict:
        """Server-side apply (create or update) `obj`; returns the object as stored."""
        kind, name = obj["kind"], obj["metadata"]["name"]
        ns = obj["metadata"].get("namespace")
        log.info("apply %s/%s", kind, name)
        return self.request(
            "PATCH", self.path(kind, name, ns), json=obj,
            params={"fieldManager": FIELD_MANAGER, "force": "true"},
            headers={"Content-Type": "application/apply-patch+yaml"},
        )

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        return self.request("GET", self.path(kind, name, namespace), ok_missing=True)

    def list(self, kind: str, *, label_selector: str | None = None,
             field_selector: str | None = None, namespace: str | None = None) -> list[dict]:
        params = {k: v for k, v in (("labelSelector", label_selector),
                                    ("fieldSelector", field_selector)) if v}
        return self.request("GET", self.path(kind, None, namespace), params=params)["items"]

    def delete(self, kind: str, name: str, namespace: str | None = None) -> bool:
        """Delete (foreground); True if it existed. A missing object is not an error."""
        out = self.request("DELETE", self.path(kind, name, namespace), ok_missing=True,
                           json={"propagationPolicy": "Foreground"})
        log.info("delete %s/%s: %s", kind, name, "deleted" if out is not None else "absent")
        return out is not None

    def pod_log(self, pod: str, container: str | None = None) -> list[str]:
        """The pod's log lines, each prefixed by the kubelet's RFC 3339 ns timestamp."""
        params = {"timestamps": "true", **({"container": container} if container else {})}
        text = self.request("GET", self.path("Pod", pod) + "/log", params=params)
        return text.splitlines() if isinstance(text, str) else []

    # -- rollout ---------------------------------------------------------------------
    def wait_ready(self, name: str, *, timeout_s: float, poll_s: float = 5.0) -> dict:
        """Poll Deployment `name` until all replicas are ready; bounded by `timeout_s`.

        Fails early when a pod is stuck in a state waiting does not fix (image pull
        error, crash loop); the error names the pod, the reason and the message.
        """
        deadline = self.clock() + timeout_s
        while True:
            dep = self.get("Deployment", name)
            if dep is None:
                raise RolloutError(f"Deployment {name} does not exist")
            want = dep.get("spec", {}).get("replicas", 1)
            status = dep.get("status", {})
            if (status.get("observedGeneration", 0) >= dep["metadata"].get("generation", 1)
                    and status.get("readyReplicas", 0) >= want
                    and status.get("updatedReplicas", 0) >= want):
                return dep
            selector = ",".join(f"{k}={v}" for k, v in
                                dep["spec"]["selector"]["matchLabels"].items())
            for pod in self.list("Pod", label_selector=selector):
                for cs in pod.get("status", {}).get("containerStatuses", []):
                    waiting = cs.get("state", {}).get("waiting") or {}
                    if waiting.get("reason") in FATAL_WAITING:
                        raise RolloutError(
                            f"Deployment {name}: pod {pod['metadata']['name']} container "
                            f"{cs.get('name')}: {waiting['reason']}: {waiting.get('message', '')}")
            if self.clock() >= deadline:
                raise RolloutError(
                    f"Deployment {name} not ready within {timeout_s:.0f}s "
                    f"(ready {status.get('readyReplicas', 0)}/{want})")
            self.sleep(poll_s)

    def wait_load_balancer(self, service: str, *, timeout_s: float, poll_s: float = 5.0) -> str:
        """Poll Service `service` until its load balancer has a hostname (or IP); return it."""
        deadline = self.clock() + timeout_s
        while True:
            svc = self.get("Service", service)
            if svc is None:
                raise RolloutError(f"Service {service} does not exist")
            for ingress in svc.get("status", {}).get("loadBalancer", {}).get("ingress", []):
                if ingress.get("hostname") or ingress.get("ip"):
                    return ingress.get("hostname") or ingress["ip"]
            if self.clock() >= deadline:
                raise RolloutError(f"Service {service}: no load balancer address within "
                                   f"{timeout_s:.0f}s (is the AWS Load Balancer Controller installed?)")
            self.sleep(poll_s)
