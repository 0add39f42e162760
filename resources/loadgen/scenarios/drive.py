"""The steady phase of a run whose scenario is not `fixed`: one module per kind,
`scenarios/<kind>.py`, whose `steady(run)` drives it (its `KIND` declares the kind's keys)."""

from __future__ import annotations

import importlib


async def scenario_steady(run) -> None:
    kind = run.cfg.scenario.kind  # spec.check admits only the kinds whose files it found
    module = importlib.import_module(f"servingbench.resources.loadgen.scenarios.{kind}")
    await module.steady(run)
