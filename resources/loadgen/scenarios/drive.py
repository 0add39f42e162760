"""The steady phase of a run whose scenario is not `fixed`: one module per kind,
`scenarios/<kind>.py`, whose `steady(run)` drives it (spec.py declares the kind's keys)."""

from __future__ import annotations

import importlib


async def scenario_steady(run) -> None:
    kind = run.cfg.scenario.kind  # spec.check admits only the kinds spec.KINDS names
    module = importlib.import_module(f"resources.loadgen.scenarios.{kind}")
    await module.steady(run)
