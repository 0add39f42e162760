"""The load generator as the chain uses it: the candidate's load plan, optionally shrunk for a
quick run (the demo, tests), driven against the deployed endpoint."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from servingbench.resources.contract.candidate import Candidate, LoadPlan
from servingbench.resources.contract.deployment import SeveralModels
from servingbench.resources.loadgen.config import LoadConfig
from servingbench.resources.loadgen.images import parse_size
from servingbench.resources.loadgen.ladder import Ladder
from servingbench.resources.loadgen.scenarios.spec import default_targets, from_mapping


@dataclass(frozen=True)
class LoadGenerator:
    concurrency: tuple[int, ...] | None = None   # override every candidate's plan
    rates: tuple[float, ...] | None = None
    requests_per_step: int | None = None
    duration_s: float | None = None              # bound each step by time (with or without a count)
    warmup_requests: int | None = None
    output_tokens: int | None = None
    input_tokens: int | None = None
    api_key_env: str | None = None
    seed: int = 0
    workers: int | None = None                   # override every candidate's load.workers
    progress: str = "log"   # "log" (Dagster log) or "terminal" (live display)

    def plan(self, candidate: Candidate) -> LoadPlan:
        """The candidate's plan with this generator's overrides; steps given here (the demo's
        quick ones) replace a ladder too."""
        p = candidate.load
        return replace(
            p, ladder=ladder_of(self, candidate),
            concurrency=self.concurrency if self.concurrency is not None else p.concurrency,
            rates=self.rates if self.rates is not None else p.rates,
            requests_per_step=self.requests_per_step or p.requests_per_step,
            warmup_requests=self.warmup_requests if self.warmup_requests is not None
            else p.warmup_requests,
            workers=self.workers if self.workers is not None else getattr(p, "workers", 1))

    def config(self, candidate: Candidate, endpoint: str, served_model: str, run_id: str,
               api_key_env: str | None = None) -> LoadConfig:
        """The one translation of a candidate into a load run, for the chain and the load
        pods alike: its plan with this generator's overrides, its scenario, and the token
        targets of the flags, else the scenario, else its kind's, else LoadConfig's own."""
        plan = self.plan(candidate)
        where = f"{candidate.name}.scenario"
        scenario, targets = from_mapping(candidate.scenario, where)
        targets = {**default_targets(scenario.kind), **targets}
        given = {"input_tokens": self.input_tokens or targets.get("input_tokens"),
                 "output_tokens": self.output_tokens or targets.get("output_tokens")}
        images = targets.get("images") or 0
        if targets.get("image_size"):
            given["image_size"] = parse_size(targets["image_size"], f"{where}.image_size")
        several = candidate.deployment if isinstance(candidate.deployment, SeveralModels) else None
        return LoadConfig(
            endpoint=endpoint, model=served_model, concurrency=list(plan.concurrency),
            rates=list(plan.rates), requests_per_step=plan.requests_per_step,
            duration_s=self.duration_s, warmup_requests=plan.warmup_requests,
            seed=self.seed, api_key_env=api_key_env or self.api_key_env, run_id=run_id,
            scenario=None if scenario.kind == "fixed" else scenario, workers=plan.workers,
            # image prompts go through the chat API (the only one that carries images)
            api="chat" if images else "completions", images=images,
            ladder=Ladder(**plan.ladder) if plan.ladder else None,
            retry_interrupted=plan.retry_interrupted,
            # several models on the node: each request names one (model_mix.py)
            model_mix=[[m.name, m.request_share] for m in several.models] if several else [],
            model_bursts=several.bursts if several else None,
            **{k: v for k, v in given.items() if v is not None})

    def run(self, candidate: Candidate, endpoint: str, served_model: str, run_dir: Path, run_id: str,
            progress=True, judge=None, api_key_env: str | None = None):
        """`api_key_env`: the deployment's key variable, when the engine needs a key."""
        from servingbench.resources.loadgen.execute import run_load

        cfg = self.config(candidate, endpoint, served_model, run_id, api_key_env)
        return run_load(cfg, run_dir, progress=progress, judge=judge)


def ladder_of(gen, candidate: Candidate) -> dict | None:
    """The candidate's load ladder (`load.ladder`), unless the load generator replaces the
    candidate's steps with its own (the demo's quick steps do)."""
    ladder = candidate.load.ladder
    if ladder is None or getattr(gen, "concurrency", None) is not None or getattr(
            gen, "rates", None) is not None:
        return None
    return ladder
