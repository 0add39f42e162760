"""A small fake Kubernetes API server: real HTTP on 127.0.0.1, just enough of the API
for apply / get / list / delete / logs, and a scripted engine pod that becomes ready
after a few polls (or gets stuck pulling its image). It checks the EKS bearer token's
shape the way EKS would before calling STS: prefix, presigned GetCallerIdentity URL,
the cluster header signed in, the expected access key id.
"""

from __future__ import annotations

import base64
import json
import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

from tests.support.eks.fakes import LoopbackServer

# collection paths a GET lists (with labelSelector); pods and events have their own routes
COLLECTIONS = {"services", "deployments", "networkpolicies", "secrets", "jobs", "configmaps",
               "scaledobjects", "horizontalpodautoscalers"}
T = "2026-11-29T02:"
LB_HOST = "k8s-servingb-sb-0123456789.elb.us-east-1.amazonaws.com"
POD_STORY = {
    "created": T + "09:12Z", "scheduled": T + "09:13Z", "pulling": T + "09:15Z",
    "pulled": T + "12:02Z", "started": T + "12:05Z", "ready": T + "21:40Z",
    "log": [
        T + "12:05.100000000Z INFO Starting vLLM API server on http://0.0.0.0:8000",
        T + "19:30.123456789Z INFO Model loading took 203.5 GiB and 445.1 seconds",
        T + "21:35.000000001Z INFO Graph capturing finished in 125 secs, took 2.1 GiB",
        T + "21:36.500000000Z INFO Application startup complete.",
    ],
}


def token_problem(header: str | None, cluster: str, key_id: str) -> str | None:
    if not header or not header.startswith("Bearer k8s-aws-v1."):
        return "no EKS bearer token"
    b64 = header.removeprefix("Bearer k8s-aws-v1.")
    try:
        url = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).decode()
    except ValueError:
        return "token is not base64url"
    q = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
    if q.get("Action") != "GetCallerIdentity":
        return "not a GetCallerIdentity URL"
    if "x-k8s-aws-id" not in q.get("X-Amz-SignedHeaders", "").split(";"):
        return "cluster header not signed"
    if not q.get("X-Amz-Credential", "").startswith(key_id + "/"):
        return "unexpected credential"
    if q.get("X-Amz-Expires") != "60" or len(q.get("X-Amz-Signature", "")) != 64:
        return "bad expiry or signature"
    return None


class FakeKubeApi(LoopbackServer):
    """`pod_runner(job, index) -> pod status` plays each pod of an applied Job each time the
    Job is read, until the pod has succeeded or failed: it may do the pod's real work
    (upload to moto's S3, or start the pod's command as a process) and returns the pod's
    `status` as the kubelet would report it (phase, containerStatuses)."""

    def __init__(self, *, cluster: str, key_id: str, ready_after: int = 2,
                 stuck: str | None = None, pod_runner=None):
        self.cluster, self.key_id = cluster, key_id
        self.ready_after, self.stuck = ready_after, stuck
        self.pod_runner = pod_runner or (lambda job, index: {"phase": "Succeeded"})
        self.deleted: list[str] = []
        self.objects: dict[str, dict] = {}  # path → object
        self.pods: dict[str, dict] = {}
        self.events: list[dict] = []
        self.nodes: dict[str, dict] = {}  # name → Node, as a test scripts them (cluster-scoped)
        self.requests: list[dict] = []
        self.polls = 0
        self.fail_delete: set[str] = set()  # object paths whose DELETE answers 500
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, body, ctype="application/json"):
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self):
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                api.requests.append({"method": self.command, "path": url.path, "query": query,
                                     "content_type": self.headers.get("Content-Type")})
                problem = token_problem(self.headers.get("Authorization"), api.cluster, api.key_id)
                if problem:
                    return self._send(401, {"kind": "Status", "message": f"Unauthorized: {problem}"})
                status, body, ctype = api.route(self.command, url.path, query, raw,
                                                self.headers.get("Content-Type"))
                self._send(status, body, ctype)

            do_GET = do_PATCH = do_DELETE = _handle

        self._serve(Handler)

    # -- the API ---------------------------------------------------------------------
    def route(self, method, path, query, raw, ctype):
        j = "application/json"
        if path.endswith("/log") and "/pods/" in path:
            pod = path.split("/")[-2]
            if pod not in self.pods:
                return 404, {"message": "pod not found"}, j
            return 200, "\n".join(POD_STORY["log"]) + "\n", "text/plain"
        if path == "/api/v1/nodes":
            sel = dict(kv.split("=", 1) for kv in query.get("labelSelector", "").split(",") if kv)
            return 200, {"items": [n for n in self.nodes.values() if all(
                n["metadata"].get("labels", {}).get(k) == v for k, v in sel.items())]}, j
        if path.endswith("/pods"):
            sel = dict(kv.split("=", 1) for kv in query.get("labelSelector", "").split(",") if kv)
            items = [p for p in self.pods.values()
                     if all(p["metadata"]["labels"].get(k) == v for k, v in sel.items())]
            return 200, {"items": items}, j
        if path.endswith("/events"):
            name = query.get("fieldSelector", "").removeprefix("involvedObject.name=")
            return 200, {"items": [e for e in self.events
                                   if e["involvedObject"]["name"] == name]}, j
        if method == "PATCH":
            if ctype != "application/apply-patch+yaml" or query.get("fieldManager") != "servingbench":
                return 415, {"message": "server-side apply expected"}, j
            obj = json.loads(raw)
            old = self.objects.get(path)
            # set by the server on create, as the real API does (the reaper dates objects by it)
            obj["metadata"]["creationTimestamp"] = ((old or {}).get("metadata", {}).get(
                "creationTimestamp") or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            obj["metadata"]["generation"] = (old or {}).get("metadata", {}).get("generation", 0) + 1
            obj["status"] = {}
            self.objects[path] = obj
            if obj["kind"] == "Job":
                self._create_pods(obj)
            return (200 if old else 201), obj, j
        if method == "GET" and path.rsplit("/", 1)[-1] in COLLECTIONS:
            sel = dict(kv.split("=", 1) for kv in query.get("labelSelector", "").split(",") if kv)
            items = [o for p, o in self.objects.items() if p.rsplit("/", 1)[0] == path
                     and all((o["metadata"].get("labels") or {}).get(k) == v
                             for k, v in sel.items())]
            return 200, {"items": items}, j
        if method == "GET":
            obj = self.objects.get(path)
            if obj is None:
                return 404, {"message": "not found"}, j
            if obj["kind"] == "Deployment":
                self._progress(obj)
            if obj["kind"] == "Job":
                self._run_job(obj)
            if obj["kind"] == "Service" and obj["spec"].get("type") == "LoadBalancer":
                if obj["status"].get("seen"):  # the controller names the NLB on the 2nd look
                    obj["status"] = {"loadBalancer": {"ingress": [{"hostname": LB_HOST}]}}
                else:
                    obj["status"] = {"seen": True}
            return 200, obj, j
        if method == "DELETE":
            if path in self.fail_delete:
                return 500, {"message": "etcdserver: request timed out"}, j
            obj = self.objects.pop(path, None)
            if obj is None:
                return 404, {"message": "not found"}, j
            self.deleted.append(f"{obj['kind']}/{obj['metadata']['name']}")
            if obj["kind"] == "Deployment":
                self.pods.clear()
            if obj["kind"] == "Job":
                for name in [n for n, p in self.pods.items()
                             if p["metadata"]["labels"].get("batch.kubernetes.io/job-name")
                             == obj["metadata"]["name"]]:
                    del self.pods[name]
            return 200, {"kind": "Status", "status": "Success"}, j
        return 405, {"message": "method not allowed"}, j

    def _progress(self, dep):
        """Each poll moves the rollout on: a pod appears, then becomes ready."""
        self.polls += 1
        name = dep["metadata"]["name"] + "-7d9f8c6b5-x2x4q"
        if name not in self.pods:
            labels = dep["spec"]["template"]["metadata"]["labels"]
            self.pods[name] = {"metadata": {"name": name, "labels": labels,
                                            "creationTimestamp": POD_STORY["created"]},
                               "status": {"conditions": [], "containerStatuses": []}}
        pod = self.pods[name]
        if self.stuck:
            pod["status"]["containerStatuses"] = [{"name": "engine", "ready": False, "state": {
                "waiting": {"reason": self.stuck, "message": "manifest unknown"}}}]
            return
        if self.polls < self.ready_after:
            return
        s = POD_STORY
        pod["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": s["scheduled"]},
            {"type": "Ready", "status": "True", "lastTransitionTime": s["ready"]}]
        pod["status"]["containerStatuses"] = [{"name": "engine", "ready": True, "state": {
            "running": {"startedAt": s["started"]}}}]
        self.events[:] = [
            {"reason": r, "firstTimestamp": s[k], "involvedObject": {"name": name}}
            for r, k in (("Scheduled", "scheduled"), ("Pulling", "pulling"),
                         ("Pulled", "pulled"), ("Started", "started"))]
        want = dep["spec"]["replicas"]
        dep["status"] = {"observedGeneration": dep["metadata"]["generation"],
                         "replicas": want, "readyReplicas": want, "updatedReplicas": want,
                         "availableReplicas": want}

    # -- an Indexed Job: one pod per index, played by pod_runner --------------------------
    def _create_pods(self, job):
        name = job["metadata"]["name"]
        # Kubernetes defaults an unset completions to 1 (a plain, non-indexed Job)
        for i in range(job["spec"].get("completions", 1)):
            labels = dict(job["spec"]["template"].get("metadata", {}).get("labels", {}))
            labels.update({"batch.kubernetes.io/job-name": name, "job-name": name,
                           "batch.kubernetes.io/job-completion-index": str(i)})
            pod = f"{name}-{i}-abcde"
            self.pods[pod] = {"metadata": {
                "name": pod, "labels": labels, "creationTimestamp": POD_STORY["created"],
                "annotations": {"batch.kubernetes.io/job-completion-index": str(i)}},
                "status": {"phase": "Pending"}}

    def _run_job(self, job):
        name = job["metadata"]["name"]
        mine = [p for p in self.pods.values()
                if p["metadata"]["labels"].get("batch.kubernetes.io/job-name") == name]
        for pod in mine:
            if pod["status"].get("phase") not in ("Succeeded", "Failed"):
                index = int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
                pod["status"] = self.pod_runner(job, index)
        phases = [p["status"].get("phase") for p in mine]
        ok, failed = phases.count("Succeeded"), phases.count("Failed")
        status = {"succeeded": ok, "failed": failed, "active": len(mine) - ok - failed}
        if failed:
            status["failedIndexes"] = ",".join(
                p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
                for p in mine if p["status"].get("phase") == "Failed")
        if ok + failed == job["spec"].get("completions", 1):
            status["conditions"] = [{"type": "Failed", "status": "True", "reason": "FailedIndexes"}
                                    if failed else {"type": "Complete", "status": "True"}]
        job["status"] = status
