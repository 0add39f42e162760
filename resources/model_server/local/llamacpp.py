"""LlamaCppModelServer: the real local engine. llama.cpp's OpenAI-compatible server
(llama-cpp-python, installed by `make engine`) serving a GGUF model on a free loopback port
of this host, with the candidate's threads and context. Runs it serves are `measured`:
this host is the scope, and nothing about them is modelled.

Facts about llama-cpp-python's server this relies on (measured against 0.3.36):
* it streams no `usage`, so output tokens are counted from content chunks
  (`output_tokens_source = chunks`);
* an `X-Request-ID` that is not a UUID is answered with 400 (the load generator sends UUIDs);
* by default a new request interrupts the stream in progress; `--interrupt_requests False`
  makes concurrent requests queue instead (one model lock: it serves one at a time);
* `/extras/tokenize/count` counts tokens (`{"input": ...}` → `{"count": n}`); there is no
  `/metrics`, so the launcher (llamacpp_serve.py) adds one with the engine's own counters.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

from servingbench.resources.contract import deployment_record, settings
from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.contract.deployment import Replicated, SeveralModels, Single
from servingbench.resources.contract.scope import ClusterInfo
from servingbench.resources.contract.timestamps import format_ts
from servingbench.resources.model_server import engine_args, engines
from servingbench.resources.model_server.child import ChildProcess
from servingbench.resources.model_server.interface import Deployment, ModelServer

ENGINE = "llama.cpp (llama-cpp-python server)"
REPO = Path(__file__).resolve().parents[3]  # the tree's root, above resources/model_server/local
# the engine is on loopback: a proxy variable in the environment must not route its
# readiness checks elsewhere (urllib's default opener honours them)
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
REPLICA_NICE = 5  # an episode's engine replicas, below the load generator (deploy_replicas)
QUANT_TYPES = {"q8_0": 7, "q2_k": 10, "q4_k_m": 15}   # LLAMA_FTYPE_MOSTLY_* of llama.h


class EngineNotInstalled(RuntimeError):
    """llama-cpp-python or the model file is missing; the message says which `make` fixes it."""


class EngineStartError(RuntimeError):
    """The server exited or was not ready in time; carries the tail of its output."""


def cache_root() -> Path:
    return Path(settings.get("SERVINGBENCH_CACHE_DIR") or Path.home() / ".cache" / "servingbench")


def models_dir() -> Path:
    return cache_root() / "models"


def engine_version() -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version("llama-cpp-python")
    except PackageNotFoundError:
        return None


def engine_available() -> str | None:
    """None when the engine and the reference model are installed, else why not."""
    if engine_version() is None:
        return "llama-cpp-python is not installed (run `make engine`)"
    try:
        import fastapi  # noqa: F401
        import sse_starlette  # noqa: F401
        import starlette_context  # noqa: F401
    except ImportError as exc:
        return f"the server extra is incomplete ({exc.name} missing; run `make engine`)"
    if not (models_dir() / "gemma-3-270m-q4_k_m.gguf").exists():
        return f"the model is not in {models_dir()} (run `make engine`)"
    return None


def resolve_model(name: str) -> Path:
    path = Path(name).expanduser()
    if not path.is_absolute():
        path = models_dir() / name
    return path


def requantize(src: Path, dst: Path, ftype: str, threads: int | None = None) -> Path:
    """Write `dst`, `src` requantized to `ftype` with llama.cpp's own quantize API
    (`allow_requantize`: the source is already quantized, so this is lossy on purpose)."""
    import llama_cpp

    if dst.exists():
        return dst
    if not src.exists():
        raise EngineNotInstalled(f"requantize: source model {src} missing (run `make engine`)")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = QUANT_TYPES[ftype]
    params.allow_requantize = True
    params.nthread = threads or os.cpu_count() or 1
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + f".tmp{os.getpid()}")
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), params)
    if rc != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"llama_model_quantize({src.name} -> {ftype}) returned {rc}")
    os.replace(tmp, dst)
    return dst


def model_file_for(candidate: Candidate) -> Path:
    """The candidate's GGUF, requantized first when it is derived and not built yet."""
    plan = candidate.llamacpp
    path = resolve_model(plan.model_file)
    if plan.requantize_from and not path.exists():
        requantize(resolve_model(plan.requantize_from), path, candidate.precision, plan.threads)
    if not path.exists():
        raise EngineNotInstalled(f"model file {path} missing (run `make engine`)")
    return path


_SHA_CACHE: dict[tuple[str, int, int], str] = {}


def file_sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _SHA_CACHE:
        h = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _SHA_CACHE[key] = h.hexdigest()
    return _SHA_CACHE[key]


# What the engine's process may see of this process's environment: these names, and those
# starting with a prefix ending in "_". Nothing else: the pipeline's environment holds AWS
# credentials, the engine's API key and Dagster's settings, none of which the engine needs,
# and llama-cpp-python's server reads its own settings from bare variables (`MODEL`,
# `PORT`, `API_KEY`, ...), so a stray one would change what is served.
CHILD_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM",
             "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_PATH", "LLAMA_CPP_LIB_PATH",
             "LC_", "OMP_", "GGML_")


def child_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The engine process's environment: the allow-listed part of `environ`, and a
    PYTHONPATH that finds this repository first."""
    names = tuple(n for n in CHILD_ENV if not n.endswith("_"))
    prefixes = tuple(n for n in CHILD_ENV if n.endswith("_"))
    env = {k: v for k, v in environ.items() if k in names or k.startswith(prefixes)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), environ.get("PYTHONPATH")) if p)
    return env


class LlamaCppProcess:
    """The server as a ChildProcess (child.py): its own process group, which `stop` kills
    whole (SIGTERM, SIGKILL after a grace period), and a launcher that stops that group
    when this process dies, so no worker thread or child outlives a run."""

    def __init__(self, args: list[str], ready_timeout_s: float = 180, host: str = "127.0.0.1",
                 nice: int = 0):
        self.args, self.ready_timeout_s, self.host = list(args), ready_timeout_s, host
        self.nice = nice
        self.child: ChildProcess | None = None
        self.port: int | None = None
        self.markers: dict[str, dict] = {}
        self.ready_at_ns: int | None = None
        self._dir: tempfile.TemporaryDirectory | None = None
        self._lines: list[str] = []
        self._reader: threading.Thread | None = None

    @property
    def proc(self) -> subprocess.Popen | None:
        return None if self.child is None else self.child.proc

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> LlamaCppProcess:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            if line.startswith('{"servingbench"'):
                try:
                    doc = json.loads(line)
                    self.markers[doc["servingbench"]] = doc
                    continue
                except (ValueError, KeyError):
                    pass
            self._lines.append(line)
            del self._lines[:-200]

    def output_tail(self, n: int = 40) -> str:
        if self._reader is not None and self.proc is not None and self.proc.poll() is not None:
            self._reader.join(timeout=2)  # an exited server's last lines
        return "\n".join(self._lines[-n:])

    def start(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="servingbench-llamacpp-")
        port_file = Path(self._dir.name) / "port"
        cmd = [sys.executable, "-m", "servingbench.resources.model_server.local.llamacpp_serve",
               *self.args, "--host", self.host, "--port", "0", "--port_file", str(port_file)]
        self.child = ChildProcess(cmd, name="llama.cpp server", env=child_env(os.environ),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  port_file=port_file, ready=self._models_ok,
                                  ready_timeout_s=self.ready_timeout_s, poll_s=0.05,
                                  nice=self.nice, tail=self.output_tail, error=EngineStartError)
        self.child.spawn()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            self.port = self.child.wait_ready()
        except BaseException:
            self.stop()
            raise
        self.ready_at_ns = time.time_ns()

    def start_phases(self) -> dict[str, dict]:
        """The start-up phases the launcher's markers split (replicas.py writes each as a
        `replica_phase` event): `weights_load`, from the model's construction to its end.
        What came before it (the interpreter and the engine's library loading) and after
        it (to the pool) the replica set counts itself."""
        wl0, wl1 = self.markers.get("weights_load_started"), self.markers.get("weights_load_ended")
        if not (wl0 and wl1):
            return {}
        return {"weights_load": {"started_at": format_ts(wl0["at_ns"]),
                                 "ended_at": format_ts(wl1["at_ns"])}}

    def engine_load_s(self) -> float | None:
        """The model's load time as llama.cpp itself measured it (seconds), if reported."""
        ms = (self.markers.get("weights_load_ended") or {}).get("engine_load_ms")
        return None if ms is None else ms / 1000

    def _models_ok(self, port: int | None = None) -> bool:
        """Ready: /v1/models answers 200 on `port` (by default the one it serves on)."""
        url = f"http://{self.host}:{port or self.port}/v1/models"
        try:
            with _NO_PROXY.open(url, timeout=2) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self, grace_s: float = 5) -> int | None:
        rc = None
        if self.child is not None:
            rc = self.child.stop(grace_s)
            if self.proc is not None and self.proc.stdout is not None:
                self.proc.stdout.close()
        if self._reader is not None:
            self._reader.join(timeout=2)
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None
        return rc


def _threads(candidate: Candidate) -> int:
    return candidate.llamacpp.threads or os.cpu_count() or 1


class LlamaCppModelServer(ModelServer):
    """Starts llama.cpp's server for a `engine: llama.cpp` candidate; measured, never
    emulated."""

    def __init__(self, ready_timeout_s: float = 180):
        self.ready_timeout_s = ready_timeout_s

    def refuses(self, candidate: Candidate) -> str | None:
        """llama.cpp's replicas scale by the local policy on a gauge its launcher serves;
        several models of one llama.cpp server are measured apart (`make demo-models-real`)."""
        match candidate.deployment:
            case Single():
                return None
            case SeveralModels():
                return ("models: the chain runs several models on the emulator; llama.cpp's are "
                        "measured by `make demo-models-real` (docs/models.md)")
            case Replicated(autoscaling=None):
                return None
            case Replicated(autoscaling=a) if a.policy != "local":
                return (f"autoscaling.policy: {a.policy} runs on EKS; this host's replicas run "
                        "policy local")
            case Replicated(autoscaling=a):
                # rps is read at the balancer; a gauge from each replica's own /metrics,
                # as the engine's file says its launcher serves it
                engine = engines.get("llama.cpp")
                if a.metric != "rps" and not engine.gauges.get(a.metric):
                    return (f"autoscaling.metric: engine llama.cpp serves no {a.metric} gauge "
                            f"(use {', '.join(sorted(engine.gauges))} or rps)")
                return None
        raise TypeError(f"unknown deployment plan {candidate.deployment!r}")

    def args(self, candidate: Candidate, model_file: Path) -> list[str]:
        return engines.get("llama.cpp").launch(candidate, model_file, _threads(candidate),
                                               engine_args.active(candidate.engine_args or {}))

    @contextlib.contextmanager
    def deploy(self, candidate: Candidate, cluster: ClusterInfo | None,
               run_dir: Path) -> Iterator[Deployment]:
        why = engine_available()
        if why is not None:
            raise EngineNotInstalled(why)
        # Building a derived model is preparation, not cold start: it happens before the clock.
        model_file = model_file_for(candidate)
        sha = file_sha256(model_file)
        args = self.args(candidate, model_file)
        plan = candidate.deployment
        if isinstance(plan, Replicated):
            with self.deploy_replicas(candidate, plan, cluster, run_dir, model_file, sha,
                                      args) as dep:
                yield dep
            return
        started = time.time_ns()
        with LlamaCppProcess(args, ready_timeout_s=self.ready_timeout_s) as proc:
            ended = proc.ready_at_ns or time.time_ns()
            phases = {"deploy": {"started_at": format_ts(started), "ended_at": format_ts(ended)}}
            wl0, wl1 = proc.markers.get("weights_load_started"), proc.markers.get("weights_load_ended")
            if wl0 and wl1:
                phases["weights_load"] = {"started_at": format_ts(wl0["at_ns"]),
                                          "ended_at": format_ts(wl1["at_ns"])}
                # ready: from weights in memory to the first answer of /v1/models
                phases["ready"] = {"started_at": format_ts(wl1["at_ns"]),
                                   "ended_at": format_ts(ended)}
            host = cluster.host if cluster is not None else {}
            details = {"pid": proc.proc.pid, "port": proc.port, "args": args,
                       "model_file": str(model_file), "model_sha256": sha,
                       "threads": str(_threads(candidate)), "parallel": 1}
            deployment_record.write(run_dir, {
                "endpoint": proc.base_url, "emulated": False, "engine": ENGINE,
                "engine_version": engine_version(), "host": host, **details})
            yield Deployment(
                endpoint=proc.base_url, served_model=candidate.model,
                facts={"engine": ENGINE, "engine_version": engine_version(),
                       "image_digest": None,
                       # the weights actually served, pinned by content
                       "model_revision": f"sha256:{sha}"},
                phases=phases, emulated=False, details=details,
                # the engine runs inside the launcher: its process is the engine's host usage;
                # its /metrics has counters only, no gauge the sampler reads
                telemetry=[{"kind": "host", "pid": proc.proc.pid}])

    @contextlib.contextmanager
    def deploy_replicas(self, candidate: Candidate, plan: Replicated,
                        cluster: ClusterInfo | None, run_dir: Path, model_file: Path, sha: str,
                        args: list[str]) -> Iterator[Deployment]:
        """`replicas` (and `autoscaling`): llama.cpp servers on this host behind HAProxy,
        scaled by the local policy (fleet/replicated.py), the same machinery as the emulator's
        replicas. Each replica is its own server process with the candidate's threads; its
        start-up phases come from the launcher's markers, so they are measured."""
        from servingbench.resources.model_server.fleet.replicated import replicated

        procs: dict[str, LlamaCppProcess] = {}

        def spawn(name: str) -> LlamaCppProcess:
            # A replica starts while the schedule runs: its interpreter and the engine's
            # library load take a core for a second or more. Below the load generator's
            # priority, the client keeps the arrival schedule (a step whose scheduling lag
            # passes 10 ms is invalid) and the engines share what is left, as they would
            # share a node with its kubelet.
            procs[name] = LlamaCppProcess(args, ready_timeout_s=self.ready_timeout_s,
                                          nice=REPLICA_NICE)
            return procs[name]

        def replica_facts() -> dict:
            # what each replica's engine reported of its start (the run folder keeps it)
            return {name: {"pid": p.proc.pid if p.proc else None, "port": p.port,
                           "markers": {k: v.get("at_ns") for k, v in p.markers.items()},
                           "engine_load_s": p.engine_load_s()}
                    for name, p in procs.items()}

        with replicated(lambda name: [], run_dir, run_dir.name, plan, self.ready_timeout_s,
                        own_nodes=candidate.capacity is not None, spawn=spawn) as pool:
            host = cluster.host if cluster is not None else {}
            details = {"balancer": pool["endpoint"], "replicas": plan.replicas.as_dict(),
                       "nice": REPLICA_NICE, "args": args, "model_file": str(model_file), "model_sha256": sha,
                       "threads": str(_threads(candidate)), "parallel": 1}
            doc = {"endpoint": pool["endpoint"], "emulated": False, "engine": ENGINE,
                   "engine_version": engine_version(), "host": host,
                   "autoscaling": plan.as_dict()["autoscaling"], **details}
            deployment_record.write(run_dir, {**doc, "replica_starts": replica_facts()})
            try:
                yield Deployment(
                    endpoint=pool["endpoint"], served_model=candidate.model,
                    facts={"engine": ENGINE, "engine_version": engine_version(),
                           "image_digest": None, "model_revision": f"sha256:{sha}"},
                    phases=pool["phases"], emulated=False, details=details,
                    # replicas come and go during the run: no one process is the engine's
                    # host usage, and their /metrics carry no gauge the sampler reads
                    telemetry=[])
            finally:
                # every replica that started, with what its engine reported (scale-ups too)
                deployment_record.write(run_dir, {**doc, "replica_starts": replica_facts()})
