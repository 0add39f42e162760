"""Log-scaled axes print plain tick labels: mathtext is off in the plots' style, so
matplotlib's default `$\\mathdefault{10^{-2}}$` labels would show as raw TeX."""

from __future__ import annotations

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from servingbench.resources.report.plots import STYLE, _log_if_wide


def test_wide_axes_get_plain_log_tick_labels():
    with matplotlib.rc_context(STYLE):
        fig = Figure()
        ax = fig.add_subplot()
        ax.plot([0.001, 1.0], [0.0, 1.0])
        _log_if_wide(ax, "x", [0.001, 1.0])
        FigureCanvasAgg(fig).draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert ax.get_xscale() == "log" and "0.01" in labels and "1" in labels
    assert not any("$" in t or "mathdefault" in t for t in labels)
