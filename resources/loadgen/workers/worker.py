"""One worker of several: a local worker process (workers/local.py spawns it) or a pod
(`servingbench load --worker-index I --worker-count N`). It runs its share of every step
into its own shards, writes no manifest and scrapes no /metrics (the parent's, or the
collector's, job); a pod leaves its account in `worker.<name>.json`."""

from __future__ import annotations

from pathlib import Path

from servingbench.resources.contract import durable
from servingbench.resources.loadgen.config import LoadConfig
from servingbench.resources.loadgen.prepare import prepare
from servingbench.resources.loadgen.progress import make_progress
from servingbench.resources.loadgen.recorder import Recorder
from servingbench.resources.loadgen.steps import Run, drive
from servingbench.resources.loadgen.workers.share import Share


def run_worker(cfg: LoadConfig, run_dir: Path, share: Share, run_id: str | None, sync,
               probed: tuple[dict | None, bool] | None = None) -> dict:
    """One worker of several: its share of every step into its own shards. `sync` is the
    barrier (workers/barriers.py, workers/podsync.py); `probed`, the parent's probe of the
    endpoint. Returns a summary; SIGINT/SIGTERM finalize the shards first."""
    run_dir = Path(run_dir)
    p = prepare(cfg, run_dir, share=share, run_id=run_id, probed=probed)
    recorder = Recorder(run_dir, run_id, p.clock, worker=share.name)
    run = Run(cfg, recorder, p.prompts, p.clock, p.stream_options, {**p.headers, **cfg.headers},
              p.secrets, make_progress(False))
    run.share, run.sync = share, sync
    interrupted = drive(run, recorder)
    return {"name": share.name, "steps": run.steps, "phases": run.phases,
            "statuses": dict(run.statuses), "mismatch": run.mismatch,
            "emulated": bool(p.emulated or run.emulated), "counts": dict(recorder.counts),
            "interrupted": interrupted, "stream_options": p.stream_options}


def write_summary(run_dir: Path, summary: dict) -> Path:
    """A pod's account of its part (`worker.<name>.json`): its steps' self-watch verdicts,
    phases, statuses, for the collector that merges the shards and writes the manifest."""
    path = Path(run_dir) / f"worker.{summary['name']}.json"
    durable.write_json(path, summary, indent=1)
    return path
