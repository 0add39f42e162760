"""The emulator's HTTP application: routes, cold start, request admission, bookkeeping.

The hot path is httpproto (parsing, chunked writes) + engine (deadlines) + stream
(chunk bytes); this module only routes and accounts. Everything is EMULATED.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from servingbench.emulator import VERSION, api, faults, fidelity, specs
from servingbench.emulator.dcgm import DeviceModel
from servingbench.emulator.engine import FixedEngine, ModelEngine
from servingbench.emulator.fit import FitResult
from servingbench.emulator.groundtruth import Clock, GroundTruth, format_ts
from servingbench.emulator.httpproto import HttpConnection, Request
from servingbench.emulator.metrics import Metrics
from servingbench.emulator.perf import PerfModel
from servingbench.emulator.prefix_cache import PrefixCache
from servingbench.emulator.scheduler import Scheduler
from servingbench.emulator.speculative import Speculative
from servingbench.emulator.stream import Stream

NATURAL_MAX = 256  # without ignore_eos or max_tokens, a request "stops" within this many tokens


@dataclass
class Options:
    cfg: specs.Config
    fit: FitResult
    time_scale: float = 1.0
    seed: int = 0
    ground_truth: Path | None = None
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    fixed_timing: tuple[float, float] | None = None
    continuous_usage: bool = True
    usage: bool = True
    cold_start_s: float | None = None
    fault_rates: dict[str, float] = field(default_factory=dict)
    metrics_token_skew: float = 1.0
    prefix_cache: bool = True
    # What a client meets on other engines, so the load generator's fallbacks can be tested
    # against this server: another served name, no /tokenize or /metrics, an older vLLM that
    # rejects continuous usage stats, an API key (vLLM's --api-key).
    served_model_name: str | None = None
    tokenize: bool = True
    metrics: bool = True
    emulated_header: bool = True
    reject_continuous: bool = False
    api_key: str | None = None
    # reasoning mode: (lo, hi) reasoning tokens per request, drawn uniformly (seeded); the
    # delta field they stream in (vLLM's `reasoning_content`, or `reasoning` of newer
    # vLLM/SGLang); whether the final usage says completion_tokens_details.reasoning_tokens
    reasoning: tuple[int, int] | None = None
    reasoning_field: str = "reasoning_content"
    reasoning_details: bool = True
    # speculative decoding: (draft tokens per step, acceptance probability per position)
    speculative: tuple[int, float] | None = None
    # a KV cache smaller than the memory left after the weights (vLLM's
    # --num-gpu-blocks-override × block size): long sessions then no longer fit
    kv_cache_tokens: int | None = None
    # engine settings a sweep varies (None: the spec's default, vLLM's)
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str = "auto"  # auto (bf16) | fp8
    # start as a replica added to a running deployment: image pull, weights, compile and
    # graph capture (model.replica_phases) instead of the first deployment's sub-phases
    replica_phases: bool = False


class App:
    def __init__(self, opts: Options, loop: asyncio.AbstractEventLoop):
        self.opts, self.loop = opts, loop
        cfg = opts.cfg
        self.served_model = opts.served_model_name or cfg.model.hf_id
        self.auth = f"Bearer {opts.api_key}" if opts.api_key else None
        self.clock = Clock()
        self.model = PerfModel(cfg, 1.0 if opts.kv_cache_dtype == "fp8" else 2.0)
        kv_tokens = self.model.kv_capacity_tokens(opts.fit.kv_capacity_gb)
        if opts.kv_cache_tokens is not None:
            kv_tokens = min(kv_tokens, opts.kv_cache_tokens)
        self.kv_tokens = kv_tokens
        self.max_model_len = min(opts.max_model_len or int(cfg.serving["default_max_model_len"]),
                                 kv_tokens, cfg.model.max_context)
        self.metrics = Metrics(self.served_model, opts.metrics_token_skew)
        prof = cfg.profile()
        self.gt = GroundTruth(opts.ground_truth)
        self.rng = random.Random(opts.seed)
        self.ids = 0
        max_seqs = opts.max_num_seqs or int(cfg.serving["max_num_seqs"])
        spec = Speculative(*opts.speculative, seed=opts.seed) if opts.speculative else None
        self.metrics.spec = spec
        if opts.fixed_timing is not None:
            self.engine: FixedEngine | ModelEngine = FixedEngine(loop, self.metrics,
                                                                 *opts.fixed_timing, spec)
        else:
            budget = opts.max_num_batched_tokens or int(cfg.serving["max_num_batched_tokens"])
            # the imitated engine's scheduling policy and KV allocation: an engine that
            # allocates on demand (vLLM) preempts and counts it, as vllm:num_preemptions_total
            sched = Scheduler(self.model, max_seqs, budget, kv_tokens, spec, prof.scheduler,
                              prof.kv_reserve_output, prof.buckets, prof.block_tokens)
            if prof.kv_reserve_output < 1:
                self.metrics.preemptions = 0
            self.engine = ModelEngine(loop, self.metrics, sched, opts.time_scale)
            self.metrics.devices = DeviceModel(cfg, opts.fit.overhead_gb / cfg.tp, kv_tokens,
                                               self.model.kv_bytes_per_token)
        # in the engine's KV block (vLLM's: 16 tokens on a GPU, 128 on its CPU build)
        self.prefix_cache = (PrefixCache(kv_tokens, max(prof.block_tokens, 16))
                             if opts.prefix_cache else None)
        self.metrics.prefix_cache = self.prefix_cache
        self.ready = False
        self.phases: dict[str, dict[str, str | None]] = {}
        self.max_num_seqs = max_seqs
        self.disabled = {fn for fn, on in ((App.tokenize, opts.tokenize),
                                           (App.metrics_route, opts.metrics)) if not on}

    # --- cold start ------------------------------------------------------------------------
    def cold_start_plan(self) -> list[tuple[str, float]]:
        """Real seconds per phase: modelled × time_scale, or --cold-start-s split pro rata."""
        phases = (self.model.replica_phases() if self.opts.replica_phases
                  else self.model.cold_start_phases())
        total = sum(s for _, s in phases)
        if self.opts.cold_start_s is not None:
            return [(n, self.opts.cold_start_s * s / total) for n, s in phases]
        return [(n, s * self.opts.time_scale) for n, s in phases]

    async def cold_start(self) -> None:
        for name, secs in self.cold_start_plan():
            self.phases[name] = {"started_at": format_ts(self.clock.now_wall()), "ended_at": None}
            await asyncio.sleep(secs)
            self.phases[name]["ended_at"] = format_ts(self.clock.now_wall())
        self.ready = True

    def status(self) -> dict:
        o = self.opts
        config = {**o.cfg.describe(), "served_model_name": self.served_model,
                  "time_scale": o.time_scale, "seed": o.seed, "max_num_seqs": self.max_num_seqs,
                  "max_num_batched_tokens": (o.max_num_batched_tokens
                                             or int(o.cfg.serving["max_num_batched_tokens"])),
                  "kv_cache_dtype": o.kv_cache_dtype,
                  "max_model_len": self.max_model_len,
                  "fixed_timing_ms": list(o.fixed_timing) if o.fixed_timing else None,
                  "continuous_usage": o.continuous_usage, "usage": o.usage,
                  "fault_rates": o.fault_rates, "prefix_cache": o.prefix_cache, "metrics_token_skew": o.metrics_token_skew,
                  "reasoning_tokens": list(o.reasoning) if o.reasoning else None,
                  "kv_cache_tokens": self.kv_tokens,
                  "reasoning_field": o.reasoning_field,
                  "speculative": ({"draft_tokens": o.speculative[0],
                                   "acceptance": o.speculative[1]} if o.speculative else None),
                  "tokenize": o.tokenize, "metrics": o.metrics,
                  "emulated_header": o.emulated_header, "reject_continuous": o.reject_continuous,
                  "api_key": o.api_key is not None,  # whether one is set, never the key
                  "fit": o.fit.message, "cold_start_plan_s": dict(self.cold_start_plan()),
                  # a fitted spec is calibrated on the one machine it was fitted on, nothing else
                  "calibrated": o.cfg.fitted is not None,
                  # the cross-validated error band of this accelerator and engine against
                  # published measurements (calibration.yaml): what every figure carries
                  "fidelity": fidelity.band(o.cfg.instance.accelerator.name, o.cfg.engine).as_dict()}
        return {"emulated": True, "ready": self.ready, "phases": self.phases, "config": config,
                "version": VERSION}

    # --- routing ---------------------------------------------------------------------------
    def handle(self, conn: HttpConnection, req: Request) -> None:
        route = ROUTES.get(req.path)
        if route is not None and route[1] in self.disabled:
            route = None
        if route is None:
            conn.respond(404, b'{"detail":"Not Found"}')
            return
        method, fn = route
        if req.method != method:
            conn.respond(405, b'{"detail":"Method Not Allowed"}')
            return
        try:
            fn(self, conn, req)
        except api.ApiError as exc:
            conn.respond(exc.status, exc.body())
        except Exception as exc:  # a bug here must not hang the client: answer like vLLM's 500
            print(f"servingbench emulator: internal error on {req.method} {req.path}: {exc!r}",
                  file=sys.stderr, flush=True)
            if not conn.closed and conn.busy:
                conn.respond(500, api.error_body(500, f"emulator internal error: {exc!r}"))

    def health(self, conn: HttpConnection, req: Request) -> None:
        conn.respond(200 if self.ready else 503, b"", b"text/plain")

    def status_route(self, conn: HttpConnection, req: Request) -> None:
        conn.respond(200, json.dumps(self.status()).encode())

    def models(self, conn: HttpConnection, req: Request) -> None:
        self._need_ready()
        card = {"id": self.served_model, "object": "model", "created": int(time.time()),
                "owned_by": "vllm", "root": self.served_model, "parent": None,
                "max_model_len": self.max_model_len, "permission": []}
        conn.respond(200, json.dumps({"object": "list", "data": [card]}).encode())

    def version(self, conn: HttpConnection, req: Request) -> None:
        conn.respond(200, json.dumps({"version": VERSION}).encode())

    def metrics_route(self, conn: HttpConnection, req: Request) -> None:
        conn.respond(200, self.metrics.render(), b"text/plain; version=0.0.4; charset=utf-8")

    def tokenize(self, conn: HttpConnection, req: Request) -> None:
        self._need_ready()
        ids = api.parse_tokenize(req.body, self.served_model)
        body = {"tokens": ids, "count": len(ids), "max_model_len": self.max_model_len}
        conn.respond(200, json.dumps(body).encode())

    def _need_ready(self) -> None:
        if not self.ready:
            raise api.ApiError(503, "the engine is still loading (cold start); poll /health")

    # --- generation ------------------------------------------------------------------------
    def completions(self, conn: HttpConnection, req: Request) -> None:
        self._generate(conn, req, chat=False)

    def chat(self, conn: HttpConnection, req: Request) -> None:
        self._generate(conn, req, chat=True)

    def _generate(self, conn: HttpConnection, req: Request, chat: bool) -> None:
        self._need_ready()
        if self.auth is not None and req.headers.get("authorization") != self.auth:
            raise api.ApiError(401, "Unauthorized")
        try:
            f = faults.parse_header(req.headers.get(faults.HEADER))
        except faults.FaultError as exc:
            raise api.ApiError(400, str(exc), "X-Servingbench-Fault") from None
        g = api.parse_generation(req.body, chat, self.served_model, self.max_model_len)
        o = self.opts
        if o.reject_continuous and g.continuous_usage:
            raise api.ApiError(400, "stream_options.continuous_usage_stats: extra inputs are "
                               "not permitted", "stream_options")
        cached = self.prefix_cache.admit(g.prompt) if self.prefix_cache is not None else 0
        g = api.GenRequest(g.chat, g.stream, g.include_usage and o.usage,
                           g.continuous_usage and g.include_usage and o.usage and o.continuous_usage,
                           g.prompt_tokens, g.max_tokens, g.min_tokens, g.ignore_eos,
                           None, cached, g.images)
        target, finish = self._length(g)
        if not f.any and o.fault_rates:
            f = faults.draw(o.fault_rates, self.rng, target)
        self.ids += 1
        cid = ("chatcmpl-" if chat else "cmpl-") + f"{o.seed:x}{self.ids:08x}"
        thinking = self.rng.randint(*o.reasoning) if o.reasoning else 0
        stream = Stream(self.served_model, self.metrics, self.finished, conn, g, f, cid,
                        req.headers.get("x-request-id"), req.arrival_perf_ns, target, finish,
                        self.ids * 7, thinking, o.reasoning_field, o.reasoning_details)
        if f.status is not None:
            conn.respond(f.status, api.error_body(f.status, f"emulated fault: status {f.status}"))
            stream.headers_ns = time.perf_counter_ns()
            stream.record(f.status)
            return
        self.metrics.prompt_tokens += g.prompt_tokens
        if f.empty:
            stream.finish_empty()
            return
        if f.first_byte_delay_s > 0:
            self.loop.call_later(f.first_byte_delay_s, self._admit, stream)
        else:
            self._admit(stream)

    def _admit(self, stream: Stream) -> None:
        if not stream.alive:
            return
        if stream.faults.first_byte_delay_s > 0:
            stream.start_ns = time.perf_counter_ns()  # the engine sees it after the delay
        stream.start()
        stream.submitted = True
        self.engine.submit(stream)

    def _length(self, g: api.GenRequest) -> tuple[int, str]:
        room = self.max_model_len - g.prompt_tokens
        cap = min(g.max_tokens, room) if g.max_tokens is not None else room
        if g.ignore_eos:
            return cap, "length"
        lo = max(1, g.min_tokens)
        n = self.rng.randint(lo, max(lo, min(cap, max(NATURAL_MAX, lo))))
        n = min(n, cap)
        return n, ("length" if n >= cap else "stop")

    def finished(self, stream: Stream, status: int, abort: bool) -> None:
        """Bookkeeping when a stream ends in any way."""
        if stream.submitted:
            self.engine.abort(stream)
        m = self.metrics
        now = time.perf_counter_ns()
        if status == 200 and not abort:
            m.success[stream.finish] += 1
            m.e2e.observe((now - stream.arrival_ns) / 1e9)
        elif abort:
            m.success["abort"] += 1
        chunks = stream.chunks
        if stream.first_token_ns is not None and chunks:
            m.ttft.observe((chunks[0][1] - stream.arrival_ns) / 1e9)
        for s, x, _ in chunks:
            m.write_lag.observe((x - s) / 1e9)
        if self.gt.enabled:
            w = self.clock.wall
            self.gt.write({
                "completion_id": stream.cid, "request_id": stream.request_id,
                "arrival_ns": w(stream.arrival_ns),
                "headers_ns": w(stream.headers_ns) if stream.headers_ns is not None else None,
                "prompt_tokens": stream.req.prompt_tokens, "completion_tokens": stream.sent,
                "status": status,
                "chunks": [[w(s), w(x), k] for s, x, k in chunks],
                # reasoning mode: the reasoning tokens sent, and each chunk's kind
                **({"reasoning_tokens": min(stream.reasoning, stream.sent),
                    "chunk_kinds": ["reasoning" if k else "answer" for k in stream.kinds]}
                   if stream.kinds is not None else {}),
                **({"input_images": stream.req.images} if stream.req.images else {}),
            })

    def close(self) -> None:
        self.engine.close()
        self.gt.close()


ROUTES = {
    "/health": ("GET", App.health),
    "/servingbench/status": ("GET", App.status_route),
    "/v1/models": ("GET", App.models),
    "/metrics": ("GET", App.metrics_route),
    "/version": ("GET", App.version),
    "/tokenize": ("POST", App.tokenize),
    "/v1/completions": ("POST", App.completions),
    "/v1/chat/completions": ("POST", App.chat),
}
