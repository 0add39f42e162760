"""A candidate with several models on one node (its `models`), on the local emulator: one
emulator process serving every model (`--models`, emulator/modelset.py; resident ones share
its compute, swapped ones sleep and wake as vLLM's sleep mode does), EMULATED. With any
swapped model the load goes through the swap driver (swap/driver.py), one endpoint that routes by
the request's `model` and swaps before a request for a sleeping model; with only resident
models the emulator's own port routes by name. events.parquet gets each model's start-up
load (model_load) and every swap's model_sleep / model_wake."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from servingbench.resources.contract import deployment_record, durable
from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.contract.deployment import SeveralModels
from servingbench.resources.contract.timestamps import format_ts, parse_ts
from servingbench.resources.model_server.fleet.events import Events
from servingbench.resources.model_server.interface import Deployment
from servingbench.resources.model_server.swap.driver import load_events
from servingbench.resources.model_server.swap.process import SwapProcess

MODELS_FILE = "emulator_models.json"


def models_file(candidate: Candidate, plan: SeveralModels, run_dir: Path) -> Path:
    # the emulator's name of each model, as the candidate's own (Candidate.model_key)
    entries = [{"name": m.name, "model": replace(candidate, model=m.model).model_key,
                "precision": m.precision, "placement": m.placement,
                "memory_share": m.memory_share, "sleep_level": m.sleep_level}
               for m in plan.models]
    return durable.write_json(run_dir / MODELS_FILE, entries, indent=1)


def _envelope(status: dict) -> dict:
    """The deploy sub-phases over every model: each from the first start to the last end."""
    out: dict = {}
    for st in (status.get("models") or {}).values():
        for name, ph in (st.get("phases") or {}).items():
            if not ph or not ph.get("started_at") or not ph.get("ended_at"):
                continue
            cur = out.get(name)
            if cur is None:
                out[name] = dict(ph)
            else:
                if parse_ts(ph["started_at"]) < parse_ts(cur["started_at"]):
                    cur["started_at"] = ph["started_at"]
                if parse_ts(ph["ended_at"]) > parse_ts(cur["ended_at"]):
                    cur["ended_at"] = ph["ended_at"]
    return out


@contextlib.contextmanager
def deploy_models(server, candidate: Candidate, plan: SeveralModels,
                  run_dir: Path) -> Iterator[Deployment]:
    from servingbench.emulator.process import EmulatorProcess

    args = [*server.args(candidate, run_dir), "--models",
            str(models_file(candidate, plan, run_dir))]
    started = time.time_ns()
    with EmulatorProcess(args, ready_timeout_s=server.ready_timeout_s) as emu:
        ended = time.time_ns()
        status = emu.status()
        swapped = plan.swapped()
        if not swapped:  # with swapped models the driver's process writes every event
            load_events(Events(run_dir, run_dir.name), status)
        phases = {"deploy": {"started_at": format_ts(started), "ended_at": format_ts(ended)}}
        env = _envelope(status)
        phases.update({k: env[k] for k in ("image_pull", "weights_load", "compile", "ready")
                       if k in env})
        driver = None
        endpoint = emu.base_url
        if swapped:  # a process of its own: relaying chunks stays off the load's event loop
            driver = SwapProcess([m.as_dict() for m in plan.models], ("127.0.0.1", emu.port), run_dir,
                                 run_dir.name)
            endpoint = f"http://127.0.0.1:{driver.start()}"
        try:
            deployment_record.write(run_dir, {
                "endpoint": endpoint, "emulated": True, "pid": emu.pid,
                "models": json.loads((run_dir / MODELS_FILE).read_text()),
                "swap_driver": driver is not None,
                "config": {n: st.get("config") for n, st in (status.get("models") or {}).items()}})
            yield Deployment(
                endpoint=endpoint, served_model=plan.models[0].name,
                facts={"engine": f"servingbench-emulator ({candidate.engine})",
                       "engine_version": None, "image_digest": None},
                phases=phases, emulated=True,
                details={"pid": emu.pid, "port": emu.port, "swap_driver": endpoint
                         if driver is not None else None},
                telemetry=[{"kind": "emulated", "url": f"{emu.base_url}/metrics"}])
        finally:
            if driver is not None:
                driver.stop()
