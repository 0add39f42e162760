"""The two frontier plots of the comparison (contract §3.6): output tokens/s per accelerator
against interactivity, and the cost per 1M output tokens against interactivity.

One line per candidate; the members of one sweep on one instance type are one line (their
steps pooled into one frontier). Frontier points are joined, other valid steps are small
dots, invalid steps hollow and never joined. On the cost plot the billed cost is a solid
line and the what-if price bases (§4.1, never billed) a hatched band from the cheapest to
the dearest basis, so the two cannot be mistaken for each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd
import pyarrow as pa
from matplotlib.figure import Figure
from servingbench.resources.analysis.frontier import pareto
from servingbench.resources.report.plots import (
    CANDIDATE_COLORS,
    _log_if_wide,
    figure,
    styled,
    title,
)
from servingbench.resources.report.rundata import RunData

X = "interactivity_tok_s"
Y = "output_tok_s_per_accel"
COST = "cost_per_1m_output_usd"


@dataclass
class Line:
    """One line of the plots: a candidate, or the members of a sweep on one instance type."""

    label: str
    emulated: bool
    points: pd.DataFrame                      # every step of every member, with on_frontier
    what_if: pd.DataFrame = field(default_factory=pd.DataFrame)  # step × basis, members'


def group_key(run: RunData) -> tuple[str, str]:
    sweep = run.manifest.get("sweep") or {}
    if sweep.get("name"):
        return (f"{sweep['name']} on {run.manifest.get('instance_type')}", "sweep")
    return (run.candidate, "candidate")


def lines(latest: Sequence[RunData]) -> list[Line]:
    grouped: dict[str, list[RunData]] = {}
    for run in latest:
        if run.frontier is not None and not run.frontier.empty:
            grouped.setdefault(group_key(run)[0], []).append(run)
    out = []
    for label, runs in grouped.items():
        # a member that failed quality parity is shown, never on a frontier (as it is never
        # ranked); the members' steps pooled make one frontier, by sql/pareto.sql's rule
        points = pd.concat([r.frontier.assign(failed_parity=r.failed_parity) for r in runs],
                           ignore_index=True)
        points = pareto(pa.Table.from_pandas(points, preserve_index=False),
                        ranked=~points["failed_parity"]).to_pandas()
        wi = [r.what_if for r in runs if r.what_if is not None and not r.what_if.empty]
        emulated = any(r.emulated for r in runs)
        name = f"{label} ({len(runs)} settings)" if len(runs) > 1 else label
        out.append(Line(f"{name} (EMULATED)" if emulated else name, emulated, points,
                        pd.concat(wi, ignore_index=True) if wi else pd.DataFrame()))
    return out


def frontier_points(points: pd.DataFrame) -> pd.DataFrame:
    """A line's frontier points by interactivity: its rows whose `on_frontier` is set."""
    return points[points["on_frontier"].fillna(False).astype(bool)].sort_values(X)


def _invalid(points: pd.DataFrame) -> pd.DataFrame:
    return points[~points["valid"].fillna(False).astype(bool)]


def _invalid_label(line: Line, drawn: pd.DataFrame) -> str | None:
    """Named in the legend only when the line has nothing else to name it."""
    return f"{line.label}: invalid steps only" if drawn.empty else None


def _failed_parity(ax, line: Line, color, y: str) -> None:
    """A cross over each step of a member that failed quality parity: shown, never joined."""
    p = line.points
    if "failed_parity" not in p or not p["failed_parity"].any():
        return
    bad = p[p["failed_parity"].astype(bool)]
    ax.scatter(bad[X], bad[y], s=70, marker="x", color=color, lw=1.8, zorder=5,
               label=f"{line.label}: failed quality parity (never on a frontier)")


def _levels(ax, levels: Sequence[float]) -> None:
    for level in levels:
        ax.axvline(level, color="#999999", ls=":", lw=0.8, zorder=0)


def _finish(ax, xs: list, ylabel: str, levels: Sequence[float]) -> None:
    _log_if_wide(ax, "x", xs + list(levels))
    _levels(ax, levels)
    ax.set_xlabel("interactivity: output tokens/s one user sees (1 / p50 TPOT)")
    ax.set_ylabel(ylabel)
    if ax.get_legend_handles_labels()[0]:  # no frontier anywhere: nothing to name
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)


@styled
def plot_frontier_throughput(latest: Sequence[RunData], levels: Sequence[float]) -> Figure | None:
    ls = lines(latest)
    if not ls:
        return None
    emulated = all(line.emulated for line in ls)
    fig, (ax,) = figure(11, emulated, bottom=0.3, height=6.0)
    xs: list = []
    for i, line in enumerate(ls):
        color = CANDIDATE_COLORS[i % len(CANDIDATE_COLORS)]
        p, front, bad = line.points, frontier_points(line.points), _invalid(line.points)
        xs += list(p[X].dropna())
        ax.scatter(p[X], p[Y], s=14, color=color, alpha=0.45, zorder=2)
        ax.plot(front[X], front[Y], color=color, lw=2, marker="o", ms=6,
                label=None if front.empty else line.label,
                ls="--" if line.emulated else "-", zorder=3)
        for x, y, step in zip(front[X], front[Y], front["step"], strict=True):
            ax.annotate(step, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7,
                        color=color)
        if not bad.empty:
            ax.scatter(bad[X], bad[Y], s=60, facecolors="white", edgecolors=color, lw=1.8,
                       zorder=4, label=_invalid_label(line, front))
        _failed_parity(ax, line, color, Y)
    ax.set_ylim(bottom=0)
    _finish(ax, xs, "output tokens/s per accelerator", levels)
    title(ax, "output tokens/s per accelerator vs interactivity", emulated,
          not emulated and any(x.emulated for x in ls))
    return fig


@styled
def plot_frontier_cost(latest: Sequence[RunData], levels: Sequence[float]) -> Figure | None:
    ls = lines(latest)
    if not ls:
        return None
    emulated = all(line.emulated for line in ls)
    fig, (ax,) = figure(11, emulated, bottom=0.3, height=6.0)
    xs: list = []
    ys: list = []
    for i, line in enumerate(ls):
        color = CANDIDATE_COLORS[i % len(CANDIDATE_COLORS)]
        front, bad = frontier_points(line.points), _invalid(line.points)
        billed = front[front[COST].notna()]
        xs += list(front[X])
        ys += list(billed[COST])
        if not billed.empty:
            ax.plot(billed[X], billed[COST], color=color, lw=2, marker="o", ms=6,
                    ls="--" if line.emulated else "-", label=f"{line.label}: billed", zorder=3)
        band = _what_if_band(line, front)
        if band is not None:
            ys += list(band["low"]) + list(band["high"])
            ax.fill_between(band[X], band["low"], band["high"], facecolor="none",
                            edgecolor=color, hatch="///", lw=0.8, alpha=0.7, zorder=1,
                            label=f"{line.label}: what-if range, {band.attrs['n']} price "
                                  "bases (not billed)")
        bad = bad[bad[COST].notna()]
        xs += list(bad[X].dropna())
        ys += list(bad[COST])
        if not bad.empty:
            ax.scatter(bad[X], bad[COST], s=60, facecolors="white", edgecolors=color, lw=1.8,
                       zorder=4, label=_invalid_label(line, billed))
    if not ys:
        return None
    _log_if_wide(ax, "y", ys)
    _finish(ax, xs, "USD per 1M output tokens", levels)
    title(ax, "USD per 1M output tokens vs interactivity (solid: billed, hatched: what-if)",
          emulated, not emulated and any(x.emulated for x in ls))
    return fig


def _what_if_band(line: Line, front: pd.DataFrame) -> pd.DataFrame | None:
    """At each frontier point, the cheapest and dearest what-if cost over the price bases."""
    if line.what_if.empty or front.empty:
        return None
    wi = line.what_if.merge(front[["run_id", "step", X]], on=["run_id", "step"])
    wi = wi[wi[COST].notna()]
    if wi.empty:
        return None
    band = (wi.groupby(["run_id", "step", X])[COST].agg(low="min", high="max").reset_index()
            .sort_values(X))
    band.attrs["n"] = int(wi["basis"].nunique())
    return band

