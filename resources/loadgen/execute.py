"""`run_load`: warm-up, then the steady steps, recorded incrementally into a run folder.

The run itself is in steps.py (phases and steps) over loops.py (requests and load loops);
its set-up is prepare.py; this module saves the manifest at every boundary and returns the
result. Several workers (`cfg.workers > 1`) are run by workers/local.py; one worker of
several (a pod, or a local worker process) is workers/worker.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from servingbench.resources.contract import manifest as mf
from servingbench.resources.loadgen.config import LoadConfig
from servingbench.resources.loadgen.errors import (
    DiskFullError,
    LoadConfigError,
    LoadError,
    RunExistsError,
)
from servingbench.resources.loadgen.prepare import prepare
from servingbench.resources.loadgen.progress import make_progress
from servingbench.resources.loadgen.recorder import Recorder, refuse_existing
from servingbench.resources.loadgen.result import LoadResult
from servingbench.resources.loadgen.server_metrics import Scraper, ServerMetrics
from servingbench.resources.loadgen.steps import Run, drive


def _check_rates(cfg: LoadConfig) -> None:
    if len(set(cfg.rates)) != len(cfg.rates):
        raise LoadConfigError("rates: each rate may appear once (step names must be unique)")


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
    _check_rates(cfg)
    if cfg.scenario is not None and cfg.scenario.kind == "slo_search" and judge is None:
        raise LoadConfigError("scenario slo_search: needs a judge (the analysis decides what met the SLO)")
    if cfg.ladder is not None and judge is None:
        raise LoadConfigError("ladder: needs a judge (the analysis says each step's validity and "
                              "output tokens/s)")
    if cfg.workers > 1:
        from servingbench.resources.loadgen.workers.local import run_workers

        return run_workers(cfg, run_dir, manifest_base, progress)
    p = prepare(cfg, run_dir, manifest_base=manifest_base)
    clock, m, prompts, stream_options = p.clock, p.manifest, p.prompts, p.stream_options
    recorder = Recorder(run_dir, m["run_id"], clock)
    run = Run(cfg, recorder, prompts, clock, stream_options, {**p.headers, **cfg.headers},
              p.secrets, make_progress(progress))
    base_phases = dict(m["phases"])

    def save(final: bool = False) -> None:
        # Written at every phase and step boundary, so a run killed mid-way still has a
        # valid manifest beside its partial records; `ended_at` stays null until known.
        if p.emulated or run.emulated:
            m["source"] = "emulated"
        if m.get("model") is None:
            m["model"] = cfg.model
        m["scenario"] = prompts.scenario(stream_options)
        phases = dict(base_phases)
        for name, span in run.phases.items():
            end = span["ended_at"] or (mf.format_ts(clock.now_utc()) if final else None)
            phases[name] = {"started_at": span["started_at"], "ended_at": end}
        m["phases"] = phases
        m["steps"] = list(run.steps)
        mf.dump(m, run_dir / "manifest.json")

    run.save = save
    run.judge = judge
    run.server = ServerMetrics(run_dir, Scraper(cfg.base_url, p.headers, p.secrets))
    save()
    interrupted = drive(run, recorder, save)
    result = LoadResult(
        run_id=m["run_id"], run_dir=run_dir, source=m["source"],
        n_requests=recorder.counts["steady_state_request_log"], n_warmup=recorder.counts["warmup_log"],
        steps=run.steps, statuses=dict(run.statuses), prompt_token_mismatches=run.mismatch,
        interrupted=interrupted, ladder_stop=run.ladder_stop,
    )
    if interrupted:
        raise KeyboardInterrupt
    return result


__all__ = ["DiskFullError", "LoadError", "LoadResult", "RunExistsError", "run_load"]
