"""`run_load`: warm-up, then the steady steps, recorded incrementally into a run folder.

The run itself is in steps.py (phases and steps) over loops.py (requests and load loops);
this module sets it up, saves the manifest at every boundary and returns the result.
Several workers (`cfg.workers > 1`) are run by workers.py; one worker of several (a pod,
or a local worker process) runs here as `run_worker`, writing only its shards."""

from __future__ import annotations

import asyncio
import os
import secrets as _secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from resources.contract import durable
from resources.contract import manifest as mf
from resources.loadgen.clock import Clock
from resources.loadgen.config import LoadConfig, LoadConfigError
from resources.loadgen.errors import DiskFullError, LeftBehind, LoadError, RunExistsError
from resources.loadgen.probe import probe
from resources.loadgen.progress import make_progress
from resources.loadgen.recorder import Recorder, refuse_existing
from resources.loadgen.server_metrics import Scraper, ServerMetrics
from resources.loadgen.share import Share
from resources.loadgen.signals import SavedSignals, event_loop_runner
from resources.loadgen.steps import Run
from resources.loadgen.workload import Tokenizer, Workload


@dataclass
class LoadResult:
    run_id: str
    run_dir: Path
    source: str
    n_requests: int  # steady requests recorded
    n_warmup: int
    steps: list[dict]  # the manifest's steps[]
    statuses: dict[str, int] = field(default_factory=dict)  # steady requests per status
    prompt_token_mismatches: int = 0  # steady requests whose usage.prompt_tokens != the target
    interrupted: bool = False
    workers: list[dict] = field(default_factory=list)  # several workers: the manifest's workers[]

    @property
    def failed_workers(self) -> list[dict]:
        return [w for w in self.workers if w["status"] != "ok"]


def _run_id(clock: Clock) -> str:
    stamp = mf.format_ts(clock.now_utc())[:19].replace("-", "").replace(":", "")
    return f"{stamp}Z-load-{_secrets.token_hex(2)}"


def _presize(workload: Workload) -> None:
    """Size every prompt length the run will ask for now, before any step: a `/tokenize`
    call is blocking, and one in the middle of a step would stall every request in flight."""
    scenario = workload.cfg.scenario
    if scenario is not None and scenario.kind == "agentic":
        workload.filler(scenario.tool_result_tokens)
    if workload.dataset is None:
        workload.filler(workload.cfg.input_tokens)
        return
    for target in sorted({r["input_tokens"] for r in workload.dataset if "prompt" not in r}):
        workload.filler(target)


def _check_profile(cfg: LoadConfig) -> None:
    seen = [r for _, r in cfg.profile if r > 0] + list(cfg.rates)
    if len(set(seen)) != len(seen):
        raise LoadConfigError("rates/profile: each non-zero rate may appear once (step names must be unique)")


def _manifest(run_dir: Path, base: dict | None, run_id: str | None, clock: Clock) -> dict:
    path = run_dir / "manifest.json"
    if path.exists():
        return mf.load(path)
    if base is not None:
        m = mf.empty(base.get("run_id") or run_id or _run_id(clock), base.get("source") or "measured",
                     clock.now_utc())
        m.update({k: v for k, v in base.items() if v is not None})
        return mf.validate(m)
    return mf.empty(run_id or _run_id(clock), "measured", clock.now_utc())


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


def _save_last(save: Callable[..., None], recorder: Recorder) -> None:
    """The final manifest (phases closed at the moment the run stopped). After a full disk it
    is written into the space the recorder held back; should even that fail, the manifest
    of the last boundary stays (complete and valid) and the error says so."""
    try:
        save(final=True)
    except OSError as exc:
        if recorder.full is None or not durable.is_disk_full(exc):
            raise
        recorder.full.manifest_kept = False


def _drive(run: Run, recorder: Recorder, save: Callable[..., None] | None = None) -> bool:
    """Run `run.main()` on its own event loop and stop it the one way a run and a worker
    share; returns whether SIGINT/SIGTERM interrupted it.

    However it ends, the records are finalized and (a run, `save`) the final manifest is
    written. A full disk stops it: the flushed records stay as partial streams, and
    finalize raises DiskFullError with what was kept and what was not written."""
    interrupted = False
    saved = SavedSignals()
    try:
        with event_loop_runner() as runner:
            runner.run(run.main())
    except (KeyboardInterrupt, asyncio.CancelledError):
        interrupted = True
    except OSError as exc:  # the manifest or server_metrics.json did not fit on the disk
        if not durable.is_disk_full(exc):
            raise
        recorder.stop(Path(exc.filename or recorder.run_dir), exc)
    except DiskFullError:
        pass  # the recorder knows; finalize raises it again with the counts
    except LeftBehind:
        pass  # (a pod) the others went on without this one: it stops here, its summary says why
    finally:
        saved.restore()
        try:
            recorder.finalize()
        finally:
            run.progress.close()
            if save is not None:
                _save_last(save, recorder)
    return interrupted


def run_load(cfg: LoadConfig, run_dir: Path, manifest_base: dict | None = None,
             progress: bool | Callable[[dict], None] = True, judge=None) -> LoadResult:
    """Drive `cfg.endpoint` and write a contract §6 run folder (no bill) into `run_dir`.

    Raises RunExistsError when `run_dir` already holds request logs, LoadError when the
    endpoint cannot be used, LoadConfigError / ManifestError for bad input. An interrupted
    run (SIGINT/SIGTERM) still finalizes its records and manifest, then re-raises. A full
    disk stops the run: the flushed records stay (as partial streams), the manifest closes
    the phases at the stop, and DiskFullError says what could not be written.
    """
    run_dir = Path(run_dir)
    refuse_existing(run_dir)
    _check_profile(cfg)
    if cfg.scenario is not None and cfg.scenario.kind == "slo_search" and judge is None:
        raise LoadConfigError("scenario slo_search: needs a judge (the analysis decides what met the SLO)")
    if cfg.workers > 1:
        from resources.loadgen.workers import run_workers

        return run_workers(cfg, run_dir, manifest_base, progress)
    clock = Clock.start()
    m = _manifest(run_dir, manifest_base, cfg.run_id, clock)
    headers, secrets = auth_headers(cfg)
    stream_options, emulated = probe(cfg, headers, secrets)
    workload = Workload(cfg, Tokenizer(cfg.base_url, cfg.model, dict(headers), cfg.use_tokenize))
    _presize(workload)
    recorder = Recorder(run_dir, m["run_id"], clock)
    run = Run(cfg, recorder, workload, clock, stream_options, {**headers, **cfg.headers},
               secrets, make_progress(progress))
    base_phases = dict(m["phases"])

    def save(final: bool = False) -> None:
        # Written at every phase and step boundary, so a run killed mid-way still has a
        # valid manifest beside its partial records; `ended_at` stays null until known.
        if emulated or run.emulated:
            m["source"] = "emulated"
        if m.get("model") is None:
            m["model"] = cfg.model
        m["scenario"] = workload.scenario(stream_options)
        phases = dict(base_phases)
        for name, span in run.phases.items():
            end = span["ended_at"] or (mf.format_ts(clock.now_utc()) if final else None)
            phases[name] = {"started_at": span["started_at"], "ended_at": end}
        m["phases"] = phases
        m["steps"] = list(run.steps)
        mf.dump(m, run_dir / "manifest.json")

    run.save = save
    run.judge = judge
    run.server = ServerMetrics(run_dir, Scraper(cfg.base_url, headers, secrets))
    save()
    interrupted = _drive(run, recorder, save)
    result = LoadResult(
        run_id=m["run_id"], run_dir=run_dir, source=m["source"],
        n_requests=recorder.counts["steady_state_request_log"], n_warmup=recorder.counts["warmup_log"],
        steps=run.steps, statuses=dict(run.statuses), prompt_token_mismatches=run.mismatch,
        interrupted=interrupted,
    )
    if interrupted:
        raise KeyboardInterrupt
    return result


def run_worker(cfg: LoadConfig, run_dir: Path, share: Share, run_id: str | None, sync,
               probed: tuple[dict | None, bool] | None = None) -> dict:
    """One worker of several: its share of every step into its own shards, no manifest,
    no /metrics scraping (the parent's, or the collector's). `sync` is the barrier
    (workers.py); `probed`, the parent's probe of the endpoint. Returns a summary;
    SIGINT/SIGTERM finalize the shards first."""
    run_dir = Path(run_dir)
    refuse_existing(run_dir, share.name)
    clock = Clock.start()
    if run_id is None:
        raise LoadConfigError("run_id: required for one worker of several (--run-id): every "
                              "worker's rows must carry the same one")
    headers, secrets = auth_headers(cfg)
    stream_options, emulated = probed if probed is not None else probe(cfg, headers, secrets)
    workload = Workload(cfg, Tokenizer(cfg.base_url, cfg.model, dict(headers), cfg.use_tokenize))
    workload.for_worker(share.index, share.count)
    _presize(workload)
    recorder = Recorder(run_dir, run_id, clock, worker=share.name)
    run = Run(cfg, recorder, workload, clock, stream_options, {**headers, **cfg.headers},
              secrets, make_progress(False))
    run.share, run.sync = share, sync
    interrupted = _drive(run, recorder)
    return {"name": share.name, "steps": run.steps, "phases": run.phases,
            "statuses": dict(run.statuses), "mismatch": run.mismatch,
            "emulated": bool(emulated or run.emulated), "counts": dict(recorder.counts),
            "interrupted": interrupted, "stream_options": stream_options}


__all__ = ["DiskFullError", "LoadError", "LoadResult", "RunExistsError", "auth_headers", "run_load",
           "run_worker"]
