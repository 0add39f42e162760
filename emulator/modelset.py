"""Several models served by one emulator process on one emulated node (`--models FILE.json`),
EMULATED like everything here.

FILE.json: `[{name, model, precision, placement, memory_share, sleep_level}]` (`model` the
spec's model key, e.g. scout; `name` the served model name a request's `model` addresses).
Each model is an App of its own (server.py) with its share of the node's accelerator memory
(its KV cache is what that share leaves after its weights), all behind this process's one
port, routed by the request body's `model`:

* resident models share the accelerator's compute: a step of one model while k others
  have work in flight takes (1 + k)× its modelled time (time slicing), so one model's
  burst raises the other's TTFT, each by its own model's step times;
* swapped models (placement swapped) are vLLM engines in sleep mode, one awake at a time:
  `POST /sleep?level=1|2`, `POST /wake_up`, `GET /is_sleeping` as vLLM serves them
  (VLLM_SERVER_DEV_MODE=1), with `model=NAME` added to the query because this one process
  holds several engines. A level-1 sleep copies the weights to host memory and a wake-up
  copies them back (weights / (tp × sleep_offload_gbps) each way), a level-2 sleep frees
  them (sleep_free_s) and its wake-up reloads them from storage (weights_load_gbps), every
  wake-up plus wake_setup_s (specs.yaml cold_start). A sleeping engine serves no request
  (503), as vLLM's sleeping engine processes none; a sleep waits for the model's requests
  in flight. The first swapped model listed starts awake, the others asleep (each at its
  own level) once loaded.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import replace
from pathlib import Path
from urllib.parse import parse_qs

from servingbench.emulator import specs
from servingbench.emulator.engine import ModelEngine
from servingbench.emulator.fit import fit_of
from servingbench.emulator.groundtruth import format_ts
from servingbench.emulator.httpproto import HttpConnection, Request

GENERATION = ("/v1/completions", "/v1/chat/completions", "/tokenize")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
KEYS = {"name", "model", "precision", "placement", "memory_share", "sleep_level"}
DRAIN_POLL_S = 0.005


class ModelsError(ValueError):
    pass


def read_entries(path: Path) -> list[dict]:
    try:
        entries = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ModelsError(f"--models {path}: {exc}") from None
    if not isinstance(entries, list) or len(entries) < 2:
        raise ModelsError(f"--models {path}: expected a list of at least two models")
    names = set()
    for i, e in enumerate(entries):
        at = f"--models {path}: [{i}]"
        if not isinstance(e, dict) or not {"name", "model", "precision", "placement"} <= set(e):
            raise ModelsError(f"{at}: expected {{name, model, precision, placement, "
                              "memory_share, sleep_level}")
        if set(e) - KEYS:
            raise ModelsError(f"{at}.{sorted(set(e) - KEYS)[0]}: unknown key")
        if not isinstance(e["name"], str) or not NAME.fullmatch(e["name"]):
            # the name becomes a file name (each model's ground-truth log) and a query value
            # (`?model=NAME`): the candidates file's own rule (pipelines/models_config.py)
            raise ModelsError(f"{at}.name: {str(e['name'])[:80]!r} is not a served model "
                              "name (letters, digits, '._-', at most 64, no '/')")
        if e["placement"] not in ("resident", "swapped"):
            raise ModelsError(f"{at}.placement: {e['placement']!r} is not resident or swapped")
        if e["name"] in names:
            raise ModelsError(f"{at}.name: {e['name']!r} given twice")
        names.add(e["name"])
    return entries


class Served:
    """One model of the set: its App and, when swapped, its sleep state."""

    def __init__(self, entry: dict, app) -> None:
        self.name, self.app = entry["name"], app
        self.swapped = entry["placement"] == "swapped"
        self.level = int(entry.get("sleep_level") or 1)
        self.asleep = False
        self.busy = False      # a sleep or wake-up in progress
        self.weights_gb = app.opts.cfg.weights_bytes / specs.GB


class ModelSet:
    """The App interface (handle, cold_start, close) over several Apps."""

    def __init__(self, opts, loop: asyncio.AbstractEventLoop, entries: list[dict]) -> None:
        from servingbench.emulator.server import App

        self.opts, self.loop = opts, loop
        base = opts.cfg
        self.models: dict[str, Served] = {}
        for e in entries:
            try:
                cfg = specs.config(base.instance.name, e["model"], e["precision"], base.tp)
            except specs.SpecError as exc:
                raise ModelsError(f"model {e['name']!r}: {exc}") from None
            fit = fit_of(cfg, kv_bytes_per_value=1.0 if opts.kv_cache_dtype == "fp8" else 2.0)
            share = float(e.get("memory_share") or 1.0)
            capacity = fit.capacity_gb * share
            kv_gb = capacity - fit.weights_gb - fit.overhead_gb
            if kv_gb < fit.kv_min_gb:
                raise ModelsError(f"model {e['name']!r} does not fit its memory_share {share:g}: "
                                  f"{capacity:.1f} GB for weights {fit.weights_gb:.1f} GB + "
                                  f"overhead {fit.overhead_gb:.1f} GB + KV {fit.kv_min_gb:.1f} GB")
            fit = replace(fit, capacity_gb=capacity, kv_capacity_gb=kv_gb)
            gt = opts.ground_truth
            if gt is not None:  # one ground-truth log per model
                gt = gt.with_name(f"{gt.stem}.{e['name']}{gt.suffix}")
            app = App(replace(opts, cfg=cfg, fit=fit, served_model_name=e["name"],
                              ground_truth=gt), loop)
            if not isinstance(app.engine, ModelEngine):
                raise ModelsError("--models needs the modelled engine (not --fixed-timing)")
            served = Served(e, app)
            app.engine.slowdown = self._slowdown_of(served)
            self.models[e["name"]] = served
        self.ready = False
        self.sleeps: list[dict] = []   # every sleep and wake-up, for /servingbench/status

    # --- shared compute ---------------------------------------------------------------------
    def _slowdown_of(self, me: Served):
        def slowdown() -> float:
            others = sum(1 for m in self.models.values()
                         if m is not me and not m.asleep and not m.app.engine.idle)
            return 1.0 + others
        return slowdown

    # --- cold start -------------------------------------------------------------------------
    async def cold_start(self) -> None:
        await asyncio.gather(*(m.app.cold_start() for m in self.models.values()))
        swapped = [m for m in self.models.values() if m.swapped]
        for m in swapped[1:]:
            m.asleep = True     # vLLM: started, then put to sleep before serving
        self.ready = True

    def close(self) -> None:
        for m in self.models.values():
            m.app.close()

    # --- routing ----------------------------------------------------------------------------
    def handle(self, conn: HttpConnection, req: Request) -> None:
        path = req.path
        q = {k: v[-1] for k, v in parse_qs(req.extra.get("query", "")).items()}
        try:
            if path in GENERATION:
                return self._generation(conn, req)
            route = {("POST", "/sleep"): self._sleep, ("POST", "/wake_up"): self._wake,
                     ("GET", "/is_sleeping"): self._is_sleeping,
                     ("GET", "/v1/models"): self._list, ("GET", "/health"): self._health,
                     ("GET", "/servingbench/status"): self._status,
                     ("GET", "/metrics"): self._metrics}.get((req.method, path))
            if route is None:
                return next(iter(self.models.values())).app.handle(conn, req)
            return route(conn, q)
        except _Refused as exc:
            conn.respond(exc.status, json.dumps({"error": {"message": exc.message,
                                                           "code": exc.status}}).encode())

    def _model(self, name: str | None) -> Served:
        if name is None:
            swapped = [m for m in self.models.values() if m.swapped]
            if len(self.models) == 1 or len(swapped) == 1:
                return (swapped or list(self.models.values()))[0]
            raise _Refused(400, "several models are served here: name one with ?model=NAME")
        if name not in self.models:
            raise _Refused(404, f"The model `{name}` does not exist.")
        return self.models[name]

    def _generation(self, conn: HttpConnection, req: Request) -> None:
        try:
            name = json.loads(req.body or b"{}").get("model")
        except (ValueError, AttributeError):
            name = None
        served = self.models.get(name) if isinstance(name, str) else None
        if served is None:  # the first model's App answers vLLM's own 404 / 400
            return next(iter(self.models.values())).app.handle(conn, req)
        if served.asleep or served.busy:
            raise _Refused(503, f"model `{served.name}` is sleeping (POST /wake_up?model="
                                f"{served.name} first)")
        served.app.handle(conn, req)

    def _list(self, conn: HttpConnection, q: dict) -> None:
        if not self.ready:
            raise _Refused(503, "the engines are still loading (cold start); poll /health")
        cards = [{"id": n, "object": "model", "created": int(time.time()), "owned_by": "vllm",
                  "root": n, "parent": None, "max_model_len": m.app.max_model_len,
                  "permission": []} for n, m in self.models.items()]
        conn.respond(200, json.dumps({"object": "list", "data": cards}).encode())

    def _health(self, conn: HttpConnection, q: dict) -> None:
        conn.respond(200 if self.ready else 503, b"", b"text/plain")

    def _status(self, conn: HttpConnection, q: dict) -> None:
        body = {"emulated": True, "ready": self.ready,
                "models": {n: {**m.app.status(), "placement": "swapped" if m.swapped
                               else "resident", "asleep": m.asleep,
                               "sleep_level": m.level if m.swapped else None}
                           for n, m in self.models.items()},
                "sleeps": self.sleeps}
        conn.respond(200, json.dumps(body).encode())

    def _metrics(self, conn: HttpConnection, q: dict) -> None:
        """Every model's series, each family's lines together (a Prometheus family's samples
        follow its HELP and TYPE once)."""
        families: dict[str, list[str]] = {}
        order: list[str] = []
        for m in self.models.values():
            current = None
            for line in m.app.metrics.render().decode().splitlines():
                if line.startswith("# HELP ") or line.startswith("# TYPE "):
                    current = line.split()[2]
                    if current not in families:
                        families[current], _ = [], order.append(current)
                    if line in families[current]:
                        continue
                if current is None or not line:
                    continue
                families[current].append(line)
        text = "\n".join(line for f in order for line in families[f]) + "\n"
        conn.respond(200, text.encode(), b"text/plain; version=0.0.4; charset=utf-8")

    def _is_sleeping(self, conn: HttpConnection, q: dict) -> None:
        m = self._model(q.get("model"))
        conn.respond(200, json.dumps({"is_sleeping": m.asleep}).encode())

    # --- sleep mode -------------------------------------------------------------------------
    def _sleep(self, conn: HttpConnection, q: dict) -> None:
        m = self._model(q.get("model"))
        if not m.swapped:
            raise _Refused(400, f"model `{m.name}` is resident (not started in sleep mode)")
        level = q.get("level", "1")
        if level not in ("1", "2"):
            raise _Refused(400, f"level={level}: sleep levels are 1 and 2")
        if m.busy:
            raise _Refused(409, f"model `{m.name}` is already sleeping or waking up")
        if m.asleep:
            conn.respond(200, b"")
            return
        m.busy = True
        self.loop.create_task(self._run_sleep(conn, m, int(level)))

    async def _run_sleep(self, conn: HttpConnection, m: Served, level: int) -> None:
        started = time.time_ns()
        eng = m.app.engine
        while eng.sched.running or eng.sched.waiting:   # its requests in flight finish first
            await asyncio.sleep(DRAIN_POLL_S)
        cs = m.app.opts.cfg.cold_start
        secs = (m.weights_gb / (m.app.opts.cfg.tp * cs["sleep_offload_gbps"]) if level == 1
                else cs["sleep_free_s"])
        await asyncio.sleep(secs * self.opts.time_scale)
        m.asleep, m.busy, m.level = True, False, level
        if m.app.prefix_cache is not None:   # the KV cache is discarded at either level
            m.app.prefix_cache = type(m.app.prefix_cache)(m.app.kv_tokens)
        self._note("sleep", m, started, level)
        if not conn.closed:
            conn.respond(200, b"")

    def _wake(self, conn: HttpConnection, q: dict) -> None:
        m = self._model(q.get("model"))
        if not m.swapped:
            raise _Refused(400, f"model `{m.name}` is resident (not started in sleep mode)")
        if m.busy:
            raise _Refused(409, f"model `{m.name}` is already sleeping or waking up")
        if not m.asleep:
            conn.respond(200, b"")
            return
        m.busy = True
        self.loop.create_task(self._run_wake(conn, m))

    async def _run_wake(self, conn: HttpConnection, m: Served) -> None:
        started = time.time_ns()
        cfg = m.app.opts.cfg
        cs = cfg.cold_start
        secs = (m.weights_gb / (cfg.tp * cs["sleep_offload_gbps"]) if m.level == 1
                else m.weights_gb / cs["weights_load_gbps"]) + cs["wake_setup_s"]
        await asyncio.sleep(secs * self.opts.time_scale)
        m.asleep, m.busy = False, False
        self._note("wake_up", m, started, m.level)
        if not conn.closed:
            conn.respond(200, b"")

    def _note(self, what: str, m: Served, started_ns: int, level: int) -> None:
        ended = time.time_ns()
        self.sleeps.append({"what": what, "model": m.name, "level": level,
                            "started_at": format_ts(started_ns), "ended_at": format_ts(ended),
                            "seconds": (ended - started_ns) / 1e9})


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message
