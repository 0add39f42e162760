"""Fault injection for the signal tests, loaded into a `servingbench run` subprocess through
PYTHONPATH (Python imports `sitecustomize` at start-up): with SBTEST_HOLD=<phase>, the chain
stops inside that phase's own code, writes SBTEST_HOLD_MARK, and waits there, so a test
signals it at a moment it knows rather than one it guessed. Without SBTEST_HOLD it does
nothing. Never on the path of anything but these tests."""

from __future__ import annotations

import os
import time
from pathlib import Path

TARGETS = {  # phase -> (module, class, method) whose call is held
    "provision": ("servingbench.resources.cluster.local", "LocalHostCluster", "provision"),
    "bill": ("servingbench.resources.billing.price_sheet", "PriceSheetBill", "fetch_bill"),
}


def _hold(phase: str, mark: Path) -> None:
    import importlib

    module, cls, method = TARGETS[phase]
    owner = getattr(importlib.import_module(module), cls)
    real = getattr(owner, method)

    def held(*args, **kwargs):
        mark.write_text(f"{phase} {os.getpid()}\n")
        while True:  # until a signal ends it (SIGTERM raises inside the sleep)
            time.sleep(0.05)
        return real(*args, **kwargs)  # pragma: no cover - never reached

    setattr(owner, method, held)


if os.environ.get("SBTEST_HOLD") in TARGETS and os.environ.get("SBTEST_HOLD_MARK"):
    _hold(os.environ["SBTEST_HOLD"], Path(os.environ["SBTEST_HOLD_MARK"]))
