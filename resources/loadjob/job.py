"""One load Job on the cluster: apply its Secret and Job, watch it (bounded, with progress
logs), read every index's outcome from its pods, delete it however the block ends.

An index is `ok` only when its pod succeeded. Everything else is `failed` with the reason
Kubernetes gives (the container's exit code and termination message, an eviction, the
Job's deadline, an image that cannot be pulled, no pod at all): a worker is never
silently dropped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from servingbench.resources.contract.digits import is_digits
from servingbench.resources.contract.redact import redact
from servingbench.resources.loadjob.render import LoadJobSpec, api_key_secret, render
from servingbench.resources.model_server.kube.client import FATAL_WAITING, KubeClient

log = logging.getLogger("servingbench.loadjob")
INDEX = "batch.kubernetes.io/job-completion-index"
MESSAGE_CHARS = 400


@dataclass(frozen=True)
class PodOutcome:
    index: int
    pod: str | None
    status: str          # ok | failed
    reason: str | None

    @property
    def worker(self) -> str:
        return f"pod-{self.index}"

    def as_manifest(self) -> dict:
        return {"name": self.worker, "status": self.status, "reason": self.reason}


class LoadJob:
    """The Job (and the Secret with the engine's key, when there is one) of one run."""

    def __init__(self, kube: KubeClient, spec: LoadJobSpec, api_key: str | None = None, *,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 say: Callable[[str], None] = log.info):
        self.kube, self.spec, self.sleep, self.clock, self.say = kube, spec, sleep, clock, say
        self._secrets = (api_key,) if api_key else ()  # redacted from whatever a pod says
        self.objects = ([api_key_secret(spec, api_key)] if api_key else []) + [render(spec)]

    def __repr__(self) -> str:  # never the key
        return f"LoadJob({self.spec.name!r}, pods={self.spec.pods})"

    def apply(self) -> None:
        for obj in self.objects:
            self.kube.apply(obj)

    def delete(self) -> None:
        """Job first (its pods go with it: foreground propagation), then the Secret."""
        for obj in reversed(self.objects):
            try:
                self.kube.delete(obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"])
            except Exception as exc:  # noqa: BLE001 - every object gets its delete attempt
                log.warning("delete %s/%s failed: %s (ttlSecondsAfterFinished removes the Job)",
                            obj["kind"], obj["metadata"]["name"], exc)

    def pods(self) -> list[dict]:
        return self.kube.list("Pod", label_selector=f"batch.kubernetes.io/job-name={self.spec.name}",
                              namespace=self.spec.namespace)

    def wait(self, *, timeout_s: float, poll_s: float = 10.0) -> list[PodOutcome]:
        """Until the Job has finished, every unfinished index is stuck for good, or
        `timeout_s` passed; then each index's outcome."""
        deadline, last, why = self.clock() + timeout_s, None, None
        while True:
            job = self.kube.get("Job", self.spec.name, self.spec.namespace)
            if job is None:
                why = "the Job disappeared"
                break
            status = job.get("status") or {}
            pods = self.pods()
            stuck = _stuck(pods)
            line = (f"load Job {self.spec.name}: {status.get('succeeded', 0)}/{self.spec.pods} "
                    f"pods succeeded, {status.get('failed', 0)} failed, "
                    f"{status.get('active', 0)} active" + (f", {len(stuck)} stuck" if stuck else ""))
            if line != last:
                self.say(line)
                last = line
            finished = _finished(status)
            if finished:
                why = finished
                break
            done = status.get("succeeded", 0) + status.get("failed", 0) + len(stuck)
            if stuck and done >= self.spec.pods:
                why = "every unfinished pod is stuck"
                break
            if self.clock() >= deadline:
                why = f"not finished within {timeout_s:.0f}s"
                break
            self.sleep(poll_s)
        return outcomes(self.spec.pods, self.pods(), why, self._secrets)

    @contextmanager
    def running(self, *, timeout_s: float, poll_s: float = 10.0) -> Iterator[list[PodOutcome]]:
        """Applied, watched to the end, and deleted however the block ends; the block gets
        each index's outcome (read before the delete takes the pods away)."""
        try:
            self.apply()
            yield self.wait(timeout_s=timeout_s, poll_s=poll_s)
        finally:
            self.delete()


def _finished(status: dict) -> str | None:
    for cond in status.get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return f"Job {cond['type'].lower()}" + (f" ({cond['reason']})" if cond.get("reason")
                                                      else "")
    return None


def _index(pod: dict) -> int | None:
    meta = pod.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(INDEX) or (meta.get("labels") or {}).get(INDEX)
    return int(text) if text is not None and is_digits(str(text)) else None


def _stuck(pods: list[dict]) -> dict[int, str]:
    out = {}
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in FATAL_WAITING and _index(pod) is not None:
                out[_index(pod)] = f"{waiting['reason']}: {waiting.get('message', '')}".strip(": ")
    return out


def _reason(pod: dict, secrets: tuple[str, ...] = ()) -> str | None:
    """Why a pod did not succeed, in Kubernetes' own words; redacted, since a terminated
    container's message is its last log lines, which may echo a key, a token or a URL with
    credentials, and this text goes into the manifest."""
    status = pod.get("status") or {}
    parts = [status.get("reason"), status.get("message")]
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if state.get("terminated"):
            t = state["terminated"]
            parts.append(f"container {cs.get('name')} exited {t.get('exitCode')}"
                         + (f" ({t['reason']})" if t.get("reason") else "")
                         + (f": {t['message'].strip()[-MESSAGE_CHARS:]}" if t.get("message") else ""))
        elif (state.get("waiting") or {}).get("reason"):
            w = state["waiting"]
            parts.append(f"container {cs.get('name')} waiting: {w['reason']}"
                         + (f": {w['message']}" if w.get("message") else ""))
    text = redact("; ".join(p for p in parts if p), secrets)
    return text or None


def outcomes(n: int, pods: list[dict], why: str | None,
             secrets: tuple[str, ...] = ()) -> list[PodOutcome]:
    """Each index 0..n-1: ok when a pod of it succeeded, else failed with the latest pod's
    reason (or why the watch ended)."""
    by_index: dict[int, list[dict]] = {}
    for pod in pods:
        i = _index(pod)
        if i is not None and 0 <= i < n:
            by_index.setdefault(i, []).append(pod)
    out = []
    for i in range(n):
        mine = sorted(by_index.get(i, []),
                      key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")
        ok = [p for p in mine if (p.get("status") or {}).get("phase") == "Succeeded"]
        if ok:
            out.append(PodOutcome(i, ok[-1]["metadata"]["name"], "ok", None))
            continue
        if not mine:
            out.append(PodOutcome(i, None, "failed", f"no pod was created ({why or 'unknown'})"))
            continue
        pod = mine[-1]
        phase = (pod.get("status") or {}).get("phase") or "Unknown"
        reason = _reason(pod, secrets)
        if phase != "Failed":
            reason = f"still {phase} when the watch ended ({why})" + (f": {reason}" if reason else "")
        out.append(PodOutcome(i, pod["metadata"]["name"], "failed", reason or f"pod {phase}"))
    return out
