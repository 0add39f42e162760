"""`servingbench load`: drive an OpenAI-compatible endpoint and write a run folder (no bill).

Several load workers (processes, docs/workloads.md "Load workers"): `--workers N` splits each
closed-loop step's concurrency over N processes (c < N: the last workers sit that step
out) and deals an open-loop schedule's arrivals round-robin, so together they send the
one-worker schedule; each writes shards `<log>.w<I>.parquet`, merged at the end. One
worker of several started elsewhere (a pod): `--worker-index I --worker-count N
--start-at T` runs only its share and writes only its shards."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from servingbench.pipelines.cli.argtypes import finite, int_or, positive, positive_floats
from servingbench.pipelines.cli.load_workload import given, ladder_from_args, scenario_from_args
from servingbench.resources.contract.candidate import field_default
from servingbench.resources.contract.digits import is_digits
from servingbench.resources.contract.exits import DISK_FULL
from servingbench.resources.contract.manifest import ManifestError
from servingbench.resources.loadgen import config_file
from servingbench.resources.loadgen.config import LoadConfig
from servingbench.resources.loadgen.errors import (
    DiskFullError,
    LoadConfigError,
    LoadError,
    RunExistsError,
)
from servingbench.resources.loadgen.scenarios.spec import default, default_targets, own_steps


def _d(name: str):
    """LoadConfig's default for `name`: the flags' defaults are the config's, read not retyped."""
    return field_default(LoadConfig, name)


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _profile(text: str) -> list[tuple[float, float]]:
    try:
        return [(finite(d), finite(r)) for d, r in (seg.split(":") for seg in text.split(","))]
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(
            f"expected SECONDS:RATE[,SECONDS:RATE...], got {text!r}") from None


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME:VALUE, got {text!r}")
    return name.strip(), value.strip()


def _image_size(text: str) -> tuple[int, int]:
    from servingbench.resources.loadgen.images import parse_size

    try:
        return parse_size(text)
    except LoadConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _start_at(text: str) -> int:
    """A UTC ISO-8601 instant (`2026-11-30T18:00:00Z`) → epoch ns."""
    from datetime import datetime

    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO-8601 instant such as 2026-11-30T18:00:00Z, got {text!r}") from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"expected an instant with its zone (Z or +00:00), got {text!r}")
    return int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="servingbench load", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, default=None, metavar="FILE",
                   help="the whole load config as JSON (a load pod's load_config.json): "
                   "replaces --endpoint, --model and every flag of what to run")
    p.add_argument("--endpoint", default=None, help="base URL, e.g. http://127.0.0.1:8000 (required)")
    p.add_argument("--model", default=None, help="the served model's name (required)")
    p.add_argument("--out", required=True, type=Path, help="run folder to create (never overwritten)")
    p.add_argument("--api", choices=["completions", "chat"], default=_d("api"))
    p.add_argument("--concurrency", type=_ints, default=None, help="closed-loop steps, e.g. 1,4,8")
    p.add_argument("--rate", type=positive_floats, default=[], help="open-loop steps in req/s, e.g. 2,4")
    p.add_argument("--arrival", choices=["poisson", "constant"], default=_d("arrival"))
    p.add_argument("--profile", type=_profile, default=[],
                   help="a bursty arrival schedule of SECONDS:RATE segments, e.g. "
                        "10:0,10:10,10:100,10:0: the schedule kind's segments (one step over "
                        "the whole schedule, its SLO attainment per bucket)")
    p.add_argument("--requests", type=int, default=None,
                   help=f"requests per step (default {_d('requests_per_step')})")
    p.add_argument("--duration", type=positive, default=None, help="seconds per step")
    p.add_argument("--warmup-requests", type=int, default=_d("warmup_requests"))
    p.add_argument("--warmup-duration", type=positive, default=None)
    p.add_argument("--warmup-concurrency", type=int, default=_d("warmup_concurrency"))
    batch = default_targets("batch")
    p.add_argument("--input-tokens", type=int, default=None,
                   help=f"default {_d('input_tokens')} (batch: {batch.get('input_tokens')})")
    p.add_argument("--output-tokens", type=int, default=None,
                   help=f"default {_d('output_tokens')} (batch: {batch.get('output_tokens')})")
    p.add_argument("--dataset", type=Path, default=None, help="JSONL of prompts or length pairs")
    p.add_argument("--shared-prefix-tokens", type=int, default=0,
                   help="measure prefix-cache hits on purpose: all prompts share this many tokens")
    p.add_argument("--seed", type=int, default=_d("seed"))
    p.add_argument("--api-key-env", default=None, help="env var holding the API key (never logged)")
    p.add_argument("--connect-timeout", type=positive, default=_d("connect_timeout_s"))
    p.add_argument("--first-token-timeout", type=positive, default=_d("first_token_timeout_s"))
    p.add_argument("--total-timeout", type=positive, default=_d("total_timeout_s"))
    p.add_argument("--drain-timeout", type=positive, default=_d("drain_timeout_s"))
    p.add_argument("--no-continuous-usage", action="store_true")
    p.add_argument("--retry-interrupted", action="store_true",
                   help="send a request a spot interruption cut again, as a new request whose "
                   "retry_of is its id (docs/spot.md)")
    p.add_argument("--no-tokenize", action="store_true", help="do not size prompts with /tokenize")
    p.add_argument("--header", type=_header, action="append", default=[],
                   help="extra header on every measured request, NAME:VALUE (repeatable)")
    w = p.add_argument_group("workloads (docs/workloads.md)")
    w.add_argument("--scenario", choices=["multi-turn", "agentic", "batch"], default=None,
                   help="multi-turn sessions, agentic sessions (a context that grows by a tool "
                   "result every turn), or a batch job (--requests N --max-in-flight M)")
    w.add_argument("--turns", type=int, default=None,
                   help=f"multi-turn: turns per session (default {default('multi_turn', 'turns')}); "
                   f"agentic: at most (default {default('agentic', 'turns')})")
    w.add_argument("--max-context-tokens", type=int, default=None,
                   help="agentic: a session ends before its context passes this "
                   f"(default {default('agentic', 'max_context_tokens')})")
    w.add_argument("--tool-result-tokens", type=int, default=None,
                   help="agentic: tokens each tool result adds to the context "
                   f"(default {default('agentic', 'tool_result_tokens')})")
    w.add_argument("--images", type=int, default=_d("images"),
                   help="images per prompt, generated locally (chat API; docs/workloads.md)")
    w.add_argument("--image-size", type=_image_size, default=None, metavar="WxH",
                   help="size of each generated image (default {}x{})".format(*_d("image_size")))
    w.add_argument("--think-time-s", type=float, default=None, help="multi-turn: pause between turns")
    w.add_argument("--max-in-flight", type=int, default=None,
                   help=f"batch: requests outstanding at most (default {default('batch', 'max_in_flight')})")
    w.add_argument("--trace", type=Path, default=None, help="replay a trace file (JSONL or CSV)")
    w.add_argument("--trace-format", choices=["mooncake", "azure"], default=None)
    w.add_argument("--speedup", type=float, default=None, help="trace: divide its times by this")
    w.add_argument("--max-requests", type=int, default=None, help="trace: replay only the first N")
    w.add_argument("--slo-search", default=None, metavar="ttft_p99_s=2,tpot_p99_s=0.1",
                   help="find the highest open-loop rate that meets this SLO")
    w.add_argument("--max-probes", type=int, default=None,
                   help=f"SLO search: probe budget (default {default('slo_search', 'max_probes')})")
    w.add_argument("--slo-search-over", choices=["rate", "concurrency"], default=None,
                   help="SLO search: probe open-loop rates (default) or closed-loop concurrencies")
    w.add_argument("--start-rate", type=float, default=None,
                   help="SLO search over rate: first probe (req/s, default 1)")
    w.add_argument("--start-concurrency", type=int, default=None,
                   help="SLO search over concurrency: first probe (default 1)")
    w.add_argument("--schedule", default=None, metavar="FILE|SHAPE[:KEY=VALUE,...]",
                   help="an arrival schedule, one steady step 'schedule': a YAML file of its "
                   "keys (segments [{duration_s, rate}], or shape and its keys), or a shape "
                   "(step, spike, ramp, zero-burst-zero, day) with optional keys, e.g. "
                   "spike:peak_rate=50,length_s=120; day reads pipelines/day_load.csv unless "
                   "day_csv= says another")
    w.add_argument("--ladder", default=None, metavar="START:FACTOR:MAX[:MIN_GAIN]",
                   help="raise the load from START by FACTOR until output throughput gains "
                   "less than MIN_GAIN (default 0.05) or a step is invalid, at most MAX "
                   "(docs/sweeps.md); closed loop, or open loop with --ladder-over rate")
    w.add_argument("--ladder-over", choices=["concurrency", "rate"], default="concurrency")
    k = p.add_argument_group("load workers (docs/workloads.md)")
    k.add_argument("--workers", type=int_or("auto", 1), default=1, metavar="N|auto",
                   help="worker processes sharing the load (default 1; auto: the cores left "
                        "after the server when it is local, at least 1); batch and SLO search "
                        "run with one")
    k.add_argument("--worker-index", type=int_or("env", 0), default=None, metavar="I|env",
                   help="run as worker I of --worker-count (a pod); env: read JOB_COMPLETION_INDEX")
    k.add_argument("--worker-count", type=int, default=None, metavar="N",
                   help="the number of workers the run has (with --worker-index)")
    k.add_argument("--start-at", type=_start_at, default=None, metavar="ISO",
                   help="the UTC instant every worker starts at, e.g. 2026-11-30T18:00:00Z")
    k.add_argument("--barrier-uri", default=None, metavar="URI",
                   help="where the workers meet before every step after the first, e.g. "
                        "s3://bucket/prefix/runs/RUN/barrier (loadpod sets it); without it "
                        "they meet only at --start-at and run the next steps back to back")
    k.add_argument("--barrier-timeout", type=positive, default=None, metavar="SECONDS",
                   help="a worker that has not reached the next meeting this long after the "
                        "previous step started is left behind (default: --duration + "
                        "--drain-timeout + 65; 1800 for steps bounded by a request count)")
    k.add_argument("--worker-name", nargs="?", const="pod", default=None, metavar="NAME",
                   help="name the worker's shards pod-<I> (or NAME); default w<I>, or pod-<I> "
                        "when the index comes from the environment")
    p.add_argument("--run-id", default=None)
    p.add_argument("--no-progress", action="store_true")
    return p


def config_from_args(a: argparse.Namespace) -> LoadConfig:
    """The flags' LoadConfig; a flag not given leaves LoadConfig's (or the kind's) default."""
    if a.config is not None:
        return _config_file(a)
    for flag, value in (("--endpoint", a.endpoint), ("--model", a.model)):
        if value is None:
            raise LoadConfigError(f"{flag}: required (or --config FILE)")
    scenario = scenario_from_args(a)
    kind = scenario.kind if scenario else None
    ladder = ladder_from_args(a)
    concurrency = a.concurrency
    if concurrency is None and (a.rate or ladder or own_steps(kind)):
        concurrency = []
    requests = a.requests if a.requests is not None else (None if a.duration else _d("requests_per_step"))
    if kind == "batch":
        concurrency = [scenario.max_in_flight]
    # the kind's own token targets (batch: long input, short output), unless told otherwise
    targets = default_targets(kind) if kind else {}
    chosen = given(concurrency=concurrency, image_size=a.image_size,
                   input_tokens=a.input_tokens or targets.get("input_tokens"),
                   output_tokens=a.output_tokens or targets.get("output_tokens"))
    return LoadConfig(
        endpoint=a.endpoint, model=a.model, api=a.api, rates=a.rate,
        arrival=a.arrival, requests_per_step=requests, duration_s=a.duration,
        warmup_requests=a.warmup_requests, warmup_duration_s=a.warmup_duration,
        warmup_concurrency=a.warmup_concurrency, dataset=a.dataset,
        prefix="shared" if a.shared_prefix_tokens else "unique",
        shared_prefix_tokens=a.shared_prefix_tokens, seed=a.seed, api_key_env=a.api_key_env,
        connect_timeout_s=a.connect_timeout, first_token_timeout_s=a.first_token_timeout,
        total_timeout_s=a.total_timeout, drain_timeout_s=a.drain_timeout,
        continuous_usage=not a.no_continuous_usage, use_tokenize=not a.no_tokenize,
        retry_interrupted=a.retry_interrupted,
        headers=dict(a.header), run_id=a.run_id, scenario=scenario,
        workers=a.worker_count if a.worker_index is not None else _n_workers(a), ladder=ladder,
        images=a.images, **chosen)


# what `--config` leaves to the flags: where the records go, which worker this is, and how
# it shows progress; every other flag says what to run, which the file says instead
_NOT_PLAN = {"config", "out", "no_progress", "worker_index", "worker_count", "start_at",
             "barrier_uri", "barrier_timeout", "worker_name", "help"}


def _config_file(a: argparse.Namespace) -> LoadConfig:
    p = parser()
    for action in p._actions:
        if action.dest not in _NOT_PLAN and getattr(a, action.dest) != action.default:
            raise LoadConfigError(f"{action.option_strings[0]}: not with --config (the file "
                                  "says what to run)")
    cfg = config_file.read(a.config)
    if a.worker_index is not None and a.worker_count != cfg.workers:
        raise LoadConfigError(f"--worker-count: {a.worker_count} is not the {cfg.workers} "
                              f"workers of {a.config}")
    return cfg


def _n_workers(a: argparse.Namespace) -> int:
    if a.workers != "auto":
        return a.workers
    from servingbench.resources.loadgen.workers.local import auto_workers

    return auto_workers(a.endpoint)


def pod_share(a: argparse.Namespace):
    """The Share of one worker of several (`--worker-index`), or None; LoadConfigError names
    the flag."""
    from servingbench.resources.loadgen.workers.share import WORKER_NAME, Share

    pod_flags = [f for f, v in (("--worker-count", a.worker_count), ("--start-at", a.start_at),
                                ("--worker-name", a.worker_name), ("--barrier-uri", a.barrier_uri),
                                ("--barrier-timeout", a.barrier_timeout)) if v is not None]
    if a.worker_index is None:
        if pod_flags:
            raise LoadConfigError(f"{pod_flags[0]}: needs --worker-index")
        return None
    if a.workers != 1:
        raise LoadConfigError("--workers: not with --worker-index (one worker of several is one process)")
    if a.worker_count is None or a.worker_count < 1:
        raise LoadConfigError("--worker-count: --worker-index needs --worker-count N (N >= 1)")
    if a.start_at is None:
        raise LoadConfigError("--start-at: --worker-index needs the instant every worker starts at")
    if not a.run_id and a.config is None:  # a config file carries its own
        raise LoadConfigError("--run-id: --worker-index needs the run id every worker shares")
    index, from_env = a.worker_index, a.worker_index == "env"
    if from_env:
        raw = os.environ.get("JOB_COMPLETION_INDEX", "")
        if not is_digits(raw):
            raise LoadConfigError(f"--worker-index env: JOB_COMPLETION_INDEX is {raw[:20]!r}, "
                                  "not an integer >= 0")
        index = int(raw)
    if index >= a.worker_count:
        raise LoadConfigError(f"--worker-index: {index} is not below --worker-count {a.worker_count}")
    name = a.worker_name
    if name is None:
        name = f"pod-{index}" if from_env else f"w{index}"
    elif name == "pod":
        name = f"pod-{index}"
    if not WORKER_NAME.fullmatch(name):
        raise LoadConfigError(f"--worker-name: {name[:80]!r} is not [A-Za-z0-9_-]{{1,64}}")
    return Share(index, a.worker_count, name, a.start_at)


def _judge(cfg: LoadConfig, run_dir: Path):
    from servingbench.resources.analysis.workload_outputs import step_reader

    scenario = cfg.scenario
    return step_reader(run_dir, None if scenario is None else scenario.kind,
                       None if scenario is None else scenario.slo, ladder=cfg.ladder is not None)


def pod_sync(cfg: LoadConfig, args: argparse.Namespace, share):
    """A pod's barrier: the meetings before every step over `--barrier-uri` (podsync.py),
    or, alone, without a place to meet or with a single step, `--start-at` (and then back
    to back)."""
    from servingbench.resources.loadgen.workers.barriers import StartAt
    from servingbench.resources.loadgen.workers.podsync import PodSync, Waits, bounds, has_meetings

    if args.barrier_uri is None or share.count == 1 or not has_meetings(cfg):
        return StartAt(share.start_at_ns)
    from servingbench.resources.storage.board import Board
    from servingbench.resources.storage.runstore import RunStoreError

    try:
        waits = Waits.from_env(os.environ)
    except ValueError as exc:
        raise LoadConfigError(str(exc)) from None
    try:
        board = Board(args.barrier_uri)
    except RunStoreError as exc:
        raise LoadConfigError(f"--barrier-uri: {exc}") from None
    return PodSync(board, share.index, share.count, share.name, share.start_at_ns,
                   bounds(cfg, args.barrier_timeout), waits)


def _run_pod(cfg: LoadConfig, args: argparse.Namespace, share) -> int:
    from servingbench.resources.loadgen.workers.worker import run_worker, write_summary

    sync = pod_sync(cfg, args, share)
    try:
        summary = run_worker(cfg, args.out, share, cfg.run_id, sync)
    except BaseException:
        sync.leave()  # the others stop waiting for this pod at once
        raise
    summary["late_start_s"] = sync.late_s
    summary["meetings"] = sync.meetings
    summary["left_behind"] = sync.left_behind
    write_summary(args.out, summary)
    if summary["interrupted"]:
        sync.leave()
        raise KeyboardInterrupt
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(summary["statuses"].items())) or "none"
    print(f"worker {share.name} ({share.index + 1} of {share.count}) of run {cfg.run_id}: "
          f"{summary['counts']['steady_state_request_log']} steady requests ({statuses}); "
          f"shards in {args.out}")
    for s in summary["steps"]:
        if s["client_limited"]:
            print(f"  step {s['step']}: CLIENT-LIMITED on this worker (the analyzer marks it invalid)")
    for m in summary["meetings"]:
        if m["missing"]:
            print(f"  before {m['label']}: went on without {', '.join(m['missing'])} (left "
                  "behind: the step they were in is marked client-limited)")
    if summary["left_behind"]:
        lb = summary["left_behind"]
        print(f"servingbench load: worker {share.name} left behind at the meeting before "
              f"{lb['label']}: {lb['reason']}; it ran no further step, its records up to then "
              f"are kept in {args.out}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    from servingbench.resources.loadgen.execute import run_load

    args = parser().parse_args(argv)
    try:
        share = pod_share(args)
        cfg = config_from_args(args)
        if share is not None and not cfg.run_id:
            raise LoadConfigError(f"{args.config}: run_id: one worker of several needs the run "
                                  "id every worker shares")
        if share is not None:
            return _run_pod(cfg, args, share)
        result = run_load(cfg, args.out, progress=not args.no_progress, judge=_judge(cfg, args.out))
    except (LoadConfigError, LoadError, RunExistsError, ManifestError) as exc:
        print(f"servingbench load: error: {exc}", file=sys.stderr)
        return 2
    except DiskFullError as exc:
        print(f"servingbench load: {exc.report(args.out)}", file=sys.stderr)
        return DISK_FULL
    except KeyboardInterrupt:
        print(f"servingbench load: interrupted; completed requests are kept in {args.out}",
              file=sys.stderr)
        return 130
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(result.statuses.items())) or "none"
    print(f"run {result.run_id} ({result.source.upper()}): {result.n_requests} steady requests "
          f"({statuses}), {result.n_warmup} warm-up, in {result.run_dir}")
    for s in result.steps:
        if s["client_limited"]:
            print(f"  step {s['step']}: CLIENT-LIMITED (the analyzer marks it invalid)")
    if result.ladder_stop:
        print(f"  ladder {result.ladder_stop}")
    for w in result.failed_workers:
        print(f"servingbench load: worker {w['name']} failed ({w['reason']}); its records up to "
              f"then are kept, and the steps it was in are marked client-limited", file=sys.stderr)
    if result.prompt_token_mismatches:
        print(f"  note: {result.prompt_token_mismatches} requests had usage.prompt_tokens != "
              f"{cfg.input_tokens}", file=sys.stderr)
    return 1 if result.failed_workers else 0
