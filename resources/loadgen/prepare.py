"""The set-up every load run shares, whether one process runs it (runner.py), a parent runs
it with local worker processes (workers/local.py) or it is one worker of several, a local
process or a pod (workers/worker.py): refuse an existing run -> clock -> probe -> prompts.

Written once, so the three cannot drift: a rerun never overwrites records, the clock is
started before anything is timed, the endpoint is probed before the first request, and
every prompt length is sized before the first step."""

from __future__ import annotations

import os
import secrets as _secrets
from dataclasses import dataclass
from pathlib import Path

from servingbench.resources.contract import manifest as mf
from servingbench.resources.loadgen.clock import Clock
from servingbench.resources.loadgen.config import LoadConfig
from servingbench.resources.loadgen.errors import LoadConfigError
from servingbench.resources.loadgen.probe import probe
from servingbench.resources.loadgen.prompts import Prompts, Tokenizer
from servingbench.resources.loadgen.recorder import refuse_existing
from servingbench.resources.loadgen.workers.share import Share


@dataclass
class Prepared:
    clock: Clock
    headers: dict[str, str]  # JSON and (with `api_key_env`) bearer headers
    secrets: tuple[str, ...]  # what every error text is redacted of
    stream_options: dict | None  # what the probe found the endpoint accepts
    emulated: bool  # the probe's answer came from the engine emulator
    prompts: Prompts
    manifest: dict | None  # a run's manifest (None for one worker of several)


def run_id_for(clock: Clock) -> str:
    stamp = mf.format_ts(clock.now_utc())[:19].replace("-", "").replace(":", "")
    return f"{stamp}Z-load-{_secrets.token_hex(2)}"


def open_manifest(run_dir: Path, base: dict | None, run_id: str | None, clock: Clock) -> dict:
    """The run's manifest: the one already in `run_dir`, else a new one from `base`."""
    path = run_dir / "manifest.json"
    if path.exists():
        return mf.load(path)
    if base is not None:
        m = mf.empty(base.get("run_id") or run_id or run_id_for(clock), base.get("source") or "measured",
                     clock.now_utc())
        m.update({k: v for k, v in base.items() if v is not None})
        return mf.validate(m)
    return mf.empty(run_id or run_id_for(clock), "measured", clock.now_utc())


def auth_headers(cfg: LoadConfig) -> tuple[dict[str, str], tuple[str, ...]]:
    """The JSON and (when `api_key_env` is set) bearer headers, and the secrets to redact."""
    headers = {"Content-Type": "application/json"}
    if not cfg.api_key_env:
        return headers, ()
    key = os.environ.get(cfg.api_key_env)
    if not key:
        raise LoadConfigError(f"api_key_env: environment variable {cfg.api_key_env} is not set or empty")
    headers["Authorization"] = f"Bearer {key}"
    return headers, (key,)


def presize(prompts: Prompts) -> None:
    """Size every prompt length the run will ask for now, before any step: a `/tokenize`
    call is blocking, and one in the middle of a step would stall every request in flight."""
    scenario = prompts.cfg.scenario
    if scenario is not None and scenario.kind == "agentic":
        prompts.filler(scenario.tool_result_tokens)
    if prompts.dataset is None:
        prompts.filler(prompts.cfg.input_tokens)
        return
    for target in sorted({r["input_tokens"] for r in prompts.dataset if "prompt" not in r}):
        prompts.filler(target)


def prepare(cfg: LoadConfig, run_dir: Path, *, manifest_base: dict | None = None,
            share: Share | None = None, run_id: str | None = None,
            probed: tuple[dict | None, bool] | None = None, size: bool = True) -> Prepared:
    """Set a run (or, with `share`, one worker of several) up to its first request.

    A run opens its manifest (`manifest_base`, `cfg.run_id`); a worker writes none, so it
    needs the run's `run_id` (every worker's rows carry the same one) and takes its share of
    the prompts. `probed` is a probe already made (the parent's, for its local workers);
    `size=False` leaves the prompt sizing to the workers (a parent sends no request).
    Raises RunExistsError, LoadConfigError, LoadError."""
    refuse_existing(run_dir, share.name if share is not None else None)
    clock = Clock.start()
    m = None
    if share is None:
        m = open_manifest(run_dir, manifest_base, cfg.run_id, clock)
    elif run_id is None:
        raise LoadConfigError("run_id: required for one worker of several (--run-id): every "
                              "worker's rows must carry the same one")
    headers, secrets = auth_headers(cfg)
    stream_options, emulated = probed if probed is not None else probe(cfg, headers, secrets)
    prompts = Prompts(cfg, Tokenizer(cfg.base_url, cfg.model, dict(headers), cfg.use_tokenize))
    if share is not None:
        prompts.for_worker(share.index, share.count)
    if size:
        presize(prompts)
    return Prepared(clock, headers, secrets, stream_options, emulated, prompts, m)
