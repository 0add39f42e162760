"""`servingbench emulator` / `python -m emulator`: parse options, fit-check, serve.

Exit codes: 0 clean stop (SIGTERM/SIGINT), 2 bad options, 3 the configuration does
not fit in memory (like an out-of-memory at load), 1 the port could not be bound.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import signal
import sys
from pathlib import Path

from servingbench.emulator import faults, latency, specs
from servingbench.emulator.fit import fit_of
from servingbench.emulator.httpproto import HEAD_TIMEOUT_S, IDLE_FACTOR, HttpConnection
from servingbench.emulator.server import App, Options


def _timing(text: str) -> tuple[float, float]:
    ttft, sep, itl = text.partition(":")
    try:
        pair = (float(ttft), float(itl))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected TTFT_MS:ITL_MS, got {text!r}") from None
    if not sep or pair[0] < 0 or pair[1] <= 0:
        raise argparse.ArgumentTypeError(f"expected TTFT_MS:ITL_MS with TTFT ≥ 0, ITL > 0, got {text!r}")
    return pair


def _positive(kind):
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__}, got {text!r}") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
        return v
    return parse


def _rate(text: str) -> tuple[str, float]:
    try:
        return faults.parse_rate(text)
    except faults.FaultError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _reasoning(text: str) -> tuple[int, int]:
    lo, sep, hi = text.partition(":")
    try:
        pair = (int(lo), int(hi) if sep else int(lo))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or LO:HI tokens, got {text!r}") from None
    if pair[0] < 0 or pair[1] < pair[0]:
        raise argparse.ArgumentTypeError(f"expected 0 ≤ LO ≤ HI, got {text!r}")
    return pair


def _probability(text: str) -> float:
    try:
        p = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a probability, got {text!r}") from None
    if not 0.0 <= p <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text!r}")
    return p


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="servingbench emulator",
                                description="Local engine emulator: a vLLM-compatible server "
                                "whose every number is EMULATED (modelled, not measured).")
    p.add_argument("--candidate", default="p5.48xlarge", choices=specs.candidates())
    p.add_argument("--model", default="scout",
                   help="an architecture of architectures.yaml by its key, Hugging Face id or "
                   f"published name ({', '.join(specs.models())})")
    p.add_argument("--precision", default="bf16", choices=specs.precisions())
    p.add_argument("--tp", type=_positive(int), default=None, help="default: all accelerators")
    p.add_argument("--engine", default=None,
                   help="the engine profile the emulator imitates (engines.yaml: vllm, sglang, "
                   "tensorrt-llm, vllm-neuron, ...); default: the platform's (vLLM, on Neuron "
                   "its Neuron plugin)")
    p.add_argument("--spec", default=None, choices=specs.fitted_specs(),
                   help="a spec fitted to measurements (specs.yaml `fitted:`); it sets the "
                   "candidate, model, precision, TP and the fitted figures, over those flags")
    p.add_argument("--models", type=Path, default=None,
                   help="serve several models on the node: a JSON list of {name, model, "
                   "precision, placement (resident|swapped), memory_share, sleep_level} "
                   "(emulator/modelset.py); --candidate and --tp are the node's")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file", type=Path, default=None, help="written atomically once bound")
    p.add_argument("--time-scale", type=_positive(float), default=1.0,
                   help="multiplies modelled times (cold start, tokens); 0.05 = 20x faster")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--head-timeout-s", type=_positive(float), default=HEAD_TIMEOUT_S,
                   help="seconds a client has for a request's head (from its first byte) and "
                        "again for its body (from the head's end), else 408 and the connection "
                        f"closed; a connection with no request under way is closed after "
                        f"{IDLE_FACTOR}x this (default %(default)s s)")
    p.add_argument("--ground-truth", type=Path, default=None, help="JSONL, one line per request")
    p.add_argument("--max-num-seqs", type=_positive(int), default=None,
                   help="sequences batched at once (default: the spec's, vLLM's 256); the rest "
                   "wait, and their wait shows in TTFT")
    p.add_argument("--max-num-batched-tokens", type=_positive(int), default=None,
                   help="token budget of one step (default: the spec's, vLLM V1's 8192)")
    p.add_argument("--kv-cache-dtype", choices=("auto", "fp8"), default="auto",
                   help="fp8: 1 byte per KV value (twice the tokens held, half the bytes read)")
    p.add_argument("--max-model-len", type=_positive(int), default=None)
    p.add_argument("--fixed-timing", type=_timing, default=None, metavar="TTFT_MS:ITL_MS",
                   help="bypass the model: constant TTFT and ITL in real ms (not scaled)")
    p.add_argument("--no-continuous-usage", action="store_true")
    p.add_argument("--no-usage", action="store_true")
    p.add_argument("--cold-start-s", type=float, default=None,
                   help="total cold start in real seconds (split over the phases pro rata)")
    p.add_argument("--replica-phases", action="store_true",
                   help="cold start as a replica added to a running deployment: image_pull, "
                   "weights_load, compile (Neuron), graph_capture")
    p.add_argument("--fault-rate", type=_rate, action="append", default=[], metavar="KIND=P")
    p.add_argument("--no-prefix-cache", action="store_true",
                   help="no prefix cache (vLLM's --no-enable-prefix-caching): cached_tokens stays 0")
    p.add_argument("--metrics-token-skew", type=_positive(float), default=1.0)
    p.add_argument("--served-model-name", default=None,
                   help="the model name clients must send (default: the model's HF id)")
    p.add_argument("--api-key", default=None,
                   help="require `Authorization: Bearer KEY` on the generation routes")
    p.add_argument("--no-tokenize", action="store_true", help="/tokenize answers 404")
    p.add_argument("--no-metrics", action="store_true", help="/metrics answers 404")
    p.add_argument("--no-emulated-header", action="store_true",
                   help="omit x-servingbench-emulated: clients see an unknown engine")
    p.add_argument("--reject-continuous", action="store_true",
                   help="answer 400 to stream_options.continuous_usage_stats (older vLLM)")
    p.add_argument("--kv-cache-tokens", type=_positive(int), default=None, metavar="N",
                   help="cap the KV cache (and the prefix cache) at N tokens, like vLLM's "
                   "--num-gpu-blocks-override × block size")
    p.add_argument("--reasoning-tokens", type=_reasoning, default=None, metavar="N|LO:HI",
                   help="reasoning mode: each answer starts with N (or uniform LO..HI) reasoning "
                   "tokens streamed as reasoning deltas (part of max_tokens, as on vLLM)")
    p.add_argument("--reasoning-field", choices=["reasoning_content", "reasoning"],
                   default="reasoning_content", help="the delta field reasoning streams in")
    p.add_argument("--no-reasoning-details", action="store_true",
                   help="no usage.completion_tokens_details.reasoning_tokens (clients count "
                   "the reasoning chunks instead)")
    p.add_argument("--spec-draft-tokens", type=_positive(int), default=None, metavar="K",
                   help="speculative decoding: K draft tokens verified per decode step")
    p.add_argument("--spec-acceptance", type=_probability, default=0.7, metavar="P",
                   help="speculative decoding: acceptance probability per draft position")
    p.add_argument("--parent-pid", type=_positive(int), default=None,
                   help="exit (like SIGTERM) as soon as this process is no longer the parent")
    p.add_argument("--sched-slice-us", type=int, default=100,
                   help="Linux scheduler slice hint for timely wake-ups (0: leave it)")
    return p


def _write_port_file(path: Path, port: int) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(f"{port}\n")
    os.replace(tmp, path)


PARENT_POLL_S = 0.2


async def _watch_parent(parent_pid: int, stop: asyncio.Event) -> None:
    """Stop when the parent dies (the process is re-parented, its ppid changes), even when
    it died by SIGKILL and could not stop us. A poll on getppid() rather than Linux's
    PR_SET_PDEATHSIG: that signal follows the *thread* that started us, and a parent that
    starts the emulator from a worker thread would see it killed when the thread ends."""
    while not stop.is_set():
        if os.getppid() != parent_pid:
            print("servingbench emulator: parent process gone; stopping", file=sys.stderr,
                  flush=True)
            stop.set()
            return
        await asyncio.sleep(PARENT_POLL_S)


async def serve(opts: Options, host: str, port: int, port_file: Path | None,
                parent_pid: int | None = None, head_timeout_s: float = HEAD_TIMEOUT_S,
                models: list | None = None) -> int:
    loop = asyncio.get_running_loop()
    if parent_pid is not None and os.getppid() != parent_pid:
        return 0  # the parent died before we started: nobody to serve
    try:
        if models is not None:
            from servingbench.emulator.modelset import ModelsError, ModelSet
            try:
                app = ModelSet(opts, loop, models)
            except ModelsError as exc:
                print(f"servingbench emulator: refusing to start: {exc}", file=sys.stderr)
                return 3
        else:
            app = App(opts, loop)
    except OSError as exc:
        print(f"servingbench emulator: cannot open the ground-truth log: {exc}", file=sys.stderr)
        return 2
    try:
        server = await loop.create_server(lambda: HttpConnection(app.handle, _perf_ns, opts.emulated_header,
                                                                 head_timeout_s),
                                          host, port,
                                          reuse_address=True, backlog=1024)
    except OSError as exc:
        print(f"servingbench emulator: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 1
    # startup objects (imports, spec data) never die: keep them out of every collection
    gc.collect()
    gc.freeze()
    bound = server.sockets[0].getsockname()[1]
    print(f"servingbench emulator (EMULATED) listening on http://{host}:{bound}", flush=True)
    if port_file is not None:
        _write_port_file(port_file, bound)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loader = asyncio.create_task(app.cold_start())
    watchdog = (asyncio.create_task(_watch_parent(parent_pid, stop))
                if parent_pid is not None else None)
    await stop.wait()
    loader.cancel()
    if watchdog is not None:
        watchdog.cancel()
    server.close()
    app.close()
    return 0


def _perf_ns() -> int:
    import time
    return time.perf_counter_ns()


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.cold_start_s is not None and a.cold_start_s < 0:
        print("servingbench emulator: --cold-start-s must be ≥ 0", file=sys.stderr)
        return 2
    try:
        cfg = (specs.fitted_config(a.spec) if a.spec
               else specs.config(a.candidate, a.model, a.precision, a.tp, a.engine))
    except specs.SpecError as exc:
        print(f"servingbench emulator: {exc}", file=sys.stderr)
        return 2
    kv_bytes = 1.0 if a.kv_cache_dtype == "fp8" else 2.0
    fit = fit_of(cfg, kv_bytes_per_value=kv_bytes)
    if not fit.fits:
        print(f"servingbench emulator: refusing to start: {fit.message}", file=sys.stderr)
        return 3
    opts = Options(cfg, fit, a.time_scale, a.seed, a.ground_truth, a.max_num_seqs,
                   a.max_model_len, a.fixed_timing, not a.no_continuous_usage, not a.no_usage,
                   a.cold_start_s, dict(a.fault_rate), a.metrics_token_skew,
                   prefix_cache=not a.no_prefix_cache, served_model_name=a.served_model_name,
                   tokenize=not a.no_tokenize, metrics=not a.no_metrics,
                   emulated_header=not a.no_emulated_header,
                   reject_continuous=a.reject_continuous, api_key=a.api_key,
                   reasoning=a.reasoning_tokens, reasoning_field=a.reasoning_field,
                   reasoning_details=not a.no_reasoning_details,
                   speculative=((a.spec_draft_tokens, a.spec_acceptance)
                                if a.spec_draft_tokens else None),
                   kv_cache_tokens=a.kv_cache_tokens,
                   max_num_batched_tokens=a.max_num_batched_tokens,
                   replica_phases=a.replica_phases,
                   kv_cache_dtype=a.kv_cache_dtype)
    models = None
    if a.models is not None:
        from servingbench.emulator.modelset import ModelsError, read_entries
        try:
            models = read_entries(a.models)
        except ModelsError as exc:
            print(f"servingbench emulator: {exc}", file=sys.stderr)
            return 2
    latency.set_slice(a.sched_slice_us * 1000)
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a pinned dependency
        runner = asyncio.run
    return runner(serve(opts, a.host, a.port, a.port_file, a.parent_pid, a.head_timeout_s,
                        models))
