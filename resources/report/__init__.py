"""Reports people look at: PNG plots, one self-contained HTML per run and one comparing
the latest run of each candidate, the nightly regression check and repeatability spreads.

Reads run folders (SPEC §6); never writes into them except `report.html` and `plots/`.
"""

from resources.report.comparison import write_comparison_report
from resources.report.regression import RegressionResult, Thresholds, compare_to_history
from resources.report.run_report import write_run_report
from resources.report.rundata import ReportError

__all__ = [
    "ReportError", "RegressionResult", "Thresholds", "compare_to_history",
    "write_comparison_report", "write_run_report",
]
