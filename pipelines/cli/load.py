"""`servingbench load`: drive an OpenAI-compatible endpoint and write a run folder (no bill)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from resources.contract.manifest import ManifestError
from resources.loadgen.config import ConfigError, LoadConfig
from resources.loadgen.errors import LoadError, RunExistsError


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _profile(text: str) -> list[tuple[float, float]]:
    try:
        return [(float(d), float(r)) for d, r in (seg.split(":") for seg in text.split(","))]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected SECONDS:RATE[,SECONDS:RATE...], got {text!r}") from None


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME:VALUE, got {text!r}")
    return name.strip(), value.strip()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="servingbench load", description=__doc__)
    p.add_argument("--endpoint", required=True, help="base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True, type=Path, help="run folder to create (never overwritten)")
    p.add_argument("--api", choices=["completions", "chat"], default="completions")
    p.add_argument("--concurrency", type=_ints, default=None, help="closed-loop steps, e.g. 1,4,8")
    p.add_argument("--rate", type=_floats, default=[], help="open-loop steps in req/s, e.g. 2,4")
    p.add_argument("--arrival", choices=["poisson", "constant"], default="poisson")
    p.add_argument("--profile", type=_profile, default=[],
                   help="bursty open loop, SECONDS:RATE segments, e.g. 10:0,10:10,10:100,10:0")
    p.add_argument("--requests", type=int, default=None, help="requests per step (default 64)")
    p.add_argument("--duration", type=float, default=None, help="seconds per step")
    p.add_argument("--warmup-requests", type=int, default=8)
    p.add_argument("--warmup-duration", type=float, default=None)
    p.add_argument("--warmup-concurrency", type=int, default=4)
    p.add_argument("--input-tokens", type=int, default=512)
    p.add_argument("--output-tokens", type=int, default=128)
    p.add_argument("--dataset", type=Path, default=None, help="JSONL of prompts or length pairs")
    p.add_argument("--shared-prefix-tokens", type=int, default=0,
                   help="measure prefix-cache hits on purpose: all prompts share this many tokens")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--api-key-env", default=None, help="env var holding the API key (never logged)")
    p.add_argument("--connect-timeout", type=float, default=10)
    p.add_argument("--first-token-timeout", type=float, default=60)
    p.add_argument("--total-timeout", type=float, default=600)
    p.add_argument("--drain-timeout", type=float, default=30)
    p.add_argument("--no-continuous-usage", action="store_true")
    p.add_argument("--no-tokenize", action="store_true", help="do not size prompts with /tokenize")
    p.add_argument("--header", type=_header, action="append", default=[],
                   help="extra header on every measured request, NAME:VALUE (repeatable)")
    p.add_argument("--run-id", default=None)
    p.add_argument("--no-progress", action="store_true")
    return p


def config_from_args(a: argparse.Namespace) -> LoadConfig:
    concurrency = a.concurrency
    if concurrency is None:
        concurrency = [] if (a.rate or a.profile) else [1, 4, 8, 16, 32]
    requests = a.requests if a.requests is not None else (None if a.duration else 64)
    return LoadConfig(
        endpoint=a.endpoint, model=a.model, api=a.api, concurrency=concurrency, rates=a.rate,
        arrival=a.arrival, profile=a.profile, requests_per_step=requests, duration_s=a.duration,
        warmup_requests=a.warmup_requests, warmup_duration_s=a.warmup_duration,
        warmup_concurrency=a.warmup_concurrency, input_tokens=a.input_tokens,
        output_tokens=a.output_tokens, dataset=a.dataset,
        prefix="shared" if a.shared_prefix_tokens else "unique",
        shared_prefix_tokens=a.shared_prefix_tokens, seed=a.seed, api_key_env=a.api_key_env,
        connect_timeout_s=a.connect_timeout, first_token_timeout_s=a.first_token_timeout,
        total_timeout_s=a.total_timeout, drain_timeout_s=a.drain_timeout,
        continuous_usage=not a.no_continuous_usage, use_tokenize=not a.no_tokenize,
        headers=dict(a.header), run_id=a.run_id,
    )


def main(argv: list[str]) -> int:
    from resources.loadgen.runner import run_load

    args = parser().parse_args(argv)
    try:
        cfg = config_from_args(args)
        result = run_load(cfg, args.out, progress=not args.no_progress)
    except (ConfigError, LoadError, RunExistsError, ManifestError) as exc:
        print(f"servingbench load: error: {exc}", file=sys.stderr)
        return 2
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
    if result.prompt_token_mismatches:
        print(f"  note: {result.prompt_token_mismatches} requests had usage.prompt_tokens != "
              f"{cfg.input_tokens}", file=sys.stderr)
    return 0
