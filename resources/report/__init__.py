"""Reports people look at: PNG plots, one self-contained HTML per run and one comparing
the latest run of each candidate, the nightly regression check and repeatability spreads.

Reads run folders (contract §6); never writes into them except `report.html` and `plots/`.
Names are imported on first use, so `servingbench report --help` stays fast.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "write_run_report": "servingbench.resources.report.run_report",
    "write_comparison_report": "servingbench.resources.report.comparison",
    "compare_to_history": "servingbench.resources.report.regression",
    "RegressionResult": "servingbench.resources.report.regression",
    "Thresholds": "servingbench.resources.report.regression",
    "ReportError": "servingbench.resources.report.rundata",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'servingbench.resources.report' has no attribute {name!r}")
