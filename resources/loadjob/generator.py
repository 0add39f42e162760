"""The eks profile's load generator with load pods: the same `run(...)` as
resources/loadgen/generator.py's LoadGenerator, but the load comes from an Indexed Job of N
pods on their own nodes, and the run collects their shards from S3.

    plan → the run's LoadConfig (the chain's own, `LoadGenerator.config`) as
    load_config.json under the run's S3 prefix → Job (start instant now + start_delay_s;
    each pod reads that file, never a copy of the plan in flags) → watch → every pod's outcome →
    shards from s3://…/runs/<run_id>/ into the run folder → merged → manifest (phases,
    steps, workers) → Job deleted (always)

A pod that failed is named in the manifest's `workers` with Kubernetes' reason; whatever
shard it uploaded before failing is kept (its rows are records like any other). The run
fails only when no pod succeeded.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow.parquet as pq
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.contract.deployment import SeveralModels
from servingbench.resources.contract.schemas import PARTIAL_SUFFIX, SHARDED
from servingbench.resources.loadgen import config_file
from servingbench.resources.loadgen.config import LoadConfig
from servingbench.resources.loadgen.config_file import CONFIG_FILE
from servingbench.resources.loadgen.errors import LoadConfigError, LoadError
from servingbench.resources.loadgen.generator import LoadGenerator
from servingbench.resources.loadjob.job import LoadJob, PodOutcome
from servingbench.resources.loadjob.render import KEY_ENV, LoadJobSpec
from servingbench.resources.model_server.kube.client import KubeClient
from servingbench.resources.storage import runstore

log = logging.getLogger("servingbench.loadjob")
SUMMARY = "worker.{worker}.json"   # each pod's account of its part: steps (self-watch), phases


@dataclass
class JobLoadResult:
    run_id: str
    run_dir: Path
    n_requests: int
    n_warmup: int
    workers: list[dict]
    steps: list[dict] = field(default_factory=list)

    @property
    def failed_workers(self) -> list[dict]:
        return [w for w in self.workers if w["status"] == "failed"]


def pod_config(gen: LoadGenerator, candidate: Candidate, endpoint: str, served_model: str,
               run_id: str, pods: int, api_key: bool) -> LoadConfig:
    """The run's LoadConfig, as the chain builds it (`LoadGenerator.config`), for `pods`
    workers: what every pod reads from the run's S3 prefix (`CONFIG_FILE`)."""
    scenario = candidate.scenario if isinstance(candidate.scenario, dict) else {}
    if isinstance(candidate.deployment, SeveralModels):
        raise LoadConfigError(f"{candidate.name}.models: not supported with load pods: the "
                              "endpoint that routes by model name runs beside the run's "
                              "process (kube/models_deploy.py), out of the pods' reach")
    if scenario.get("dataset"):
        raise LoadConfigError(f"{candidate.name}.scenario.dataset: a dataset is not shipped to "
                              "load pods yet; use token targets")
    cfg = gen.config(candidate, endpoint, served_model, run_id)
    if cfg.scenario is not None:
        raise LoadConfigError(f"{candidate.name}.scenario: kind {cfg.scenario.kind!r} is not "
                              "supported with load pods (SERVINGBENCH_EKS_LOAD_PODS); fixed "
                              "steps only")
    if cfg.ladder is not None:
        raise LoadConfigError(f"{candidate.name}.load.ladder: not supported with load pods: "
                              "each step needs the whole run's records before the next")
    # the pods read the engine's key from their own Secret, under KEY_ENV
    return replace(cfg, workers=pods, api_key_env=KEY_ENV if api_key else None)


def shard_names(n: int) -> list[str]:
    """Every shard a pod may upload: its parquet files, or the streams a pod stopped by a
    full disk keeps (contract §6: a worker's stream is its shard until merged)."""
    return [f"{name}.pod-{i}{suffix}" for name in SHARDED for i in range(n)
            for suffix in (".parquet", PARTIAL_SUFFIX)]


@dataclass
class KubeJobLoadGenerator:
    """`base` keeps the plan overrides (LoadGenerator); the rest says where pods run."""

    kube: Callable[[], KubeClient]
    image: str
    data_uri: str                        # s3://bucket/prefix (SERVINGBENCH_DATA_URI)
    pods: int
    base: LoadGenerator = field(default_factory=LoadGenerator)
    namespace: str = "servingbench"
    owner: str | None = None
    service_account: str | None = None
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[tuple[str, str | None, str], ...] = ()
    cpu: str = "1"
    memory_gib: int = 2
    start_delay_s: float = 180.0         # scheduling + image pull before the barrier
    deadline_s: int = 3 * 3600
    poll_s: float = 10.0
    env: tuple[tuple[str, str], ...] = ()
    progress: str = "log"
    clock: Callable[[], int] = time.time_ns

    def run(self, candidate: Candidate, endpoint: str, served_model: str, run_dir: Path, run_id: str,
            progress=True, judge=None, api_key_env: str | None = None) -> JobLoadResult:
        if judge is not None:
            raise LoadConfigError("an SLO search or a load ladder is not supported with load "
                                  "pods: each step needs the whole run's records before the next")
        run_dir = Path(run_dir)
        say = _sayer(progress)
        start = dt.datetime.fromtimestamp(self.clock() / 1e9 + self.start_delay_s, dt.UTC)
        key = os.environ.get(api_key_env) if api_key_env else None
        upload = f"{self.data_uri.rstrip('/')}/runs/{run_id}"
        cfg = pod_config(self.base, candidate, endpoint, served_model, run_id, self.pods,
                         api_key=key is not None)
        # the pods' one source of what to run, kept in the run folder beside their records
        config_file.write(cfg, run_dir / CONFIG_FILE)
        runstore.put(run_dir, upload, {CONFIG_FILE: CONFIG_FILE})
        spec = LoadJobSpec(
            run_id=run_id, pods=self.pods, image=self.image, upload_uri=upload, start_at=mf.format_ts(int(start.timestamp() * 1e9)),
            namespace=self.namespace, owner=self.owner, service_account=self.service_account,
            node_selector=self.node_selector, tolerations=self.tolerations, cpu=self.cpu,
            memory_gib=self.memory_gib, deadline_s=self.deadline_s, api_key=key is not None,
            env=self.env)
        kube = self.kube()
        try:
            job = LoadJob(kube, spec, key, say=say)
            say(f"load Job {spec.name}: {spec.pods} pods, start at {spec.start_at}, "
                f"shards to {upload}/")
            with job.running(timeout_s=self.deadline_s + self.start_delay_s + 300,
                             poll_s=self.poll_s) as outcomes:
                pass
        finally:
            kube.close()
        return collect(upload, run_dir, outcomes, say)


def _sayer(progress) -> Callable[[str], None]:
    def say(message: str) -> None:
        log.info(message)
        if callable(progress):
            progress({"message": message})
    return say


def collect(upload: str, run_dir: Path, outcomes: list[PodOutcome],
            say: Callable[[str], None] = log.info) -> JobLoadResult:
    """Shards and pod summaries from `upload` into `run_dir`, merged; the manifest gets the
    pods' phases, steps and each pod's outcome."""
    n = len(outcomes)
    summaries = [SUMMARY.format(worker=o.worker) for o in outcomes]
    got = set(runstore.get(upload, shard_names(n) + summaries, run_dir))
    for o in outcomes:
        if o.status == "failed":
            kept = [s for s in shard_names(n) if f".{o.worker}." in s and s in got]
            say(f"load pod {o.worker} ({o.pod or 'no pod'}) FAILED: {o.reason}; "
                f"{len(kept)} shard(s) kept")
    if not any(o.status == "ok" for o in outcomes):
        raise LoadError("no load pod succeeded: " + "; ".join(
            f"{o.worker}: {o.reason}" for o in outcomes))
    _merge(run_dir)
    manifest = mf.load(run_dir / "manifest.json")
    by_worker = {o.worker: _summary(run_dir / f) for o, f in zip(outcomes, summaries, strict=True)
                 if f in got}
    pods = list(by_worker.values())
    late = [(w, p["late_start_s"]) for w, p in by_worker.items()
            if isinstance(p.get("late_start_s"), int | float) and p["late_start_s"] > 0]
    if late:
        say("load pods that started after the barrier: "
            + ", ".join(f"{w} {s:.1f}s late" for w, s in late))
    left = _left_behind(by_worker)
    if left:
        say("load pods left behind at a meeting before a step: "
            + "; ".join(f"{w} ({why})" for w, why in left.items()))
    manifest["phases"].update(_phases(pods))
    manifest["steps"] = _steps(pods)
    manifest["workers"] = [_worker(o, left) for o in outcomes]
    mf.dump(manifest, run_dir / "manifest.json")
    return JobLoadResult(manifest["run_id"], run_dir, _rows(run_dir, "steady_state_request_log"),
                         _rows(run_dir, "warmup_log"), manifest["workers"], manifest["steps"])


def _left_behind(by_worker: dict[str, dict]) -> dict[str, str]:
    """{pod: why} for the pods the others went on without (their summaries' `meetings`), or
    that found themselves late (`left_behind`): their later steps ran without them."""
    out: dict[str, str] = {}
    for p in by_worker.values():
        for m in p.get("meetings") or []:
            for w in m.get("missing") or []:
                out.setdefault(w, f"the others went on without it before {m['label']}")
    for w, p in by_worker.items():
        if isinstance(p.get("left_behind"), dict):
            lb = p["left_behind"]
            out[w] = f"left behind at the meeting before {lb.get('label')}: {lb.get('reason')}"
    return out


def _worker(o: PodOutcome, left: dict[str, str]) -> dict:
    """A pod's manifest entry: one left behind is failed (its share of the later steps was
    never sent), with that reason first and Kubernetes' after it."""
    entry = o.as_manifest()
    if o.worker in left:
        entry.update(status="failed", reason="; ".join(
            r for r in (left[o.worker], o.reason if o.status == "failed" else None) if r))
    return entry


def _merge(run_dir: Path) -> None:
    """Merge the shards into the three record files when the load generator's merge is
    there; readers treat a file and its shards as one record set either way (contract §6)."""
    try:
        from servingbench.resources.loadgen.workers.shards import merge_shards
    except ImportError:
        return
    merge_shards(run_dir)


def _summary(path: Path) -> dict:
    """A pod's summary (JSON): a bad one is a LoadError naming the file, never a traceback."""
    import json

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LoadError(f"{path}: unreadable worker summary ({exc})") from None
    if not isinstance(data, dict):
        raise LoadError(f"{path}: a worker summary is a JSON object")
    return data


def _rows(run_dir: Path, name: str) -> int:
    from servingbench.resources.contract.schemas import record_files

    return sum(pq.ParquetFile(p).metadata.num_rows for p in record_files(run_dir, name)
               if p.suffix == ".parquet")


def _phases(pods: list[dict]) -> dict:
    """warmup and steady span every pod: the earliest start to the latest end."""
    out = {}
    for phase in ("warmup", "steady"):
        spans = [p["phases"][phase] for p in pods if (p.get("phases") or {}).get(phase)]
        starts = [s["started_at"] for s in spans if s.get("started_at")]
        ends = [s["ended_at"] for s in spans if s.get("ended_at")]
        if starts:
            out[phase] = {"started_at": min(starts, key=mf.parse_ts),
                          "ended_at": max(ends, key=mf.parse_ts) if ends else None}
    return out


def _steps(pods: list[dict]) -> list[dict]:
    """One entry per step across pods: client-limited if any pod was, the worst CPU share
    and loop lag; the target is the pods' common one, or their sum when each had a share."""
    merged: dict[str, dict] = {}
    for p in pods:
        for s in p.get("steps") or []:
            m = merged.setdefault(s["step"], {**s, "targets": []})
            m["targets"].append(s.get("target"))
            m["client_limited"] = bool(m["client_limited"] or s["client_limited"])
            for k in ("client_cpu_share", "loop_lag_p99_s"):
                vals = [v for v in (m.get(k), s.get(k)) if v is not None]
                m[k] = max(vals) if vals else None
    out = []
    for m in merged.values():
        targets = [t for t in m.pop("targets") if t is not None]
        m["target"] = (targets[0] if len(set(targets)) == 1 else float(sum(targets))) \
            if targets else None
        out.append(m)
    return out
