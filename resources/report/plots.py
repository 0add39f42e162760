"""PNG plots of one run and of a comparison across candidates (matplotlib, Agg).

Figures are built with `matplotlib.figure.Figure` (no pyplot, no global backend state) on an
opaque white background with dark text, so they read the same in light and dark UIs.
Every figure that shows emulated data says EMULATED in its title and carries a faint
EMULATED watermark.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter
from servingbench.resources.contract import durable
from servingbench.resources.contract.timestamps import parse_ts
from servingbench.resources.report import cdf
from servingbench.resources.report.rundata import RunData, headline_row, latest_per_candidate

STYLE = {
    "figure.facecolor": "white", "axes.facecolor": "white", "savefig.facecolor": "white",
    "text.color": "#1a1a1a", "axes.labelcolor": "#1a1a1a", "axes.edgecolor": "#555555",
    "xtick.color": "#333333", "ytick.color": "#333333", "axes.grid": True,
    "grid.color": "#dddddd", "grid.linewidth": 0.8, "font.size": 10,
    "axes.titlesize": 11, "legend.fontsize": 9, "legend.framealpha": 0.9,
    "legend.facecolor": "white", "legend.edgecolor": "#bbbbbb",
    "text.parse_math": False,  # a `$` in a candidate name is text, never mathtext
}
DPI = 110
EMULATED_COLOR = "#b00020"
CANDIDATE_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
                    "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")


def styled(fn: Callable) -> Callable:
    """Build the whole figure under STYLE (rcParams are read when each artist is made)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with matplotlib.rc_context(STYLE):
            return fn(*args, **kwargs)
    return wrapper


def _marked(text: str, emulated: bool, mixed: bool) -> tuple[str, dict]:
    """A title carrying the EMULATED mark (`mixed`: some series are emulated, labelled so)."""
    if mixed:
        return f"includes EMULATED data - {text}", {"color": EMULATED_COLOR, "fontweight": "bold"}
    if emulated:
        return f"EMULATED - {text}", {"color": EMULATED_COLOR, "fontweight": "bold"}
    return text, {}


def title(ax, text: str, emulated: bool, mixed: bool = False) -> None:
    title, style = _marked(text, emulated, mixed)
    ax.set_title(title, **style)


def _suptitle(fig: Figure, text: str, emulated: bool, mixed: bool = False) -> None:
    """The title of a multi-panel figure."""
    title, style = _marked(text, emulated, mixed)
    fig.suptitle(title, **style)


def figure(width: float, emulated: bool, ncols: int = 1, bottom: float = 0.12,
           nrows: int = 1, height: float = 4.6) -> tuple[Figure, list]:
    # Fixed margins rather than constrained layout: it halves the drawing time.
    fig = Figure(figsize=(width, height), dpi=DPI)
    fig.subplots_adjust(left=0.8 / width, right=1 - 0.2 / width, bottom=bottom,
                        top=0.84 if ncols > 1 or nrows > 1 else 0.9, wspace=0.22, hspace=0.35)
    axes = [fig.add_subplot(nrows, ncols, i + 1) for i in range(nrows * ncols)]
    if emulated:
        fig.text(0.5, 0.5, "EMULATED", fontsize=54, color=EMULATED_COLOR, alpha=0.08,
                 ha="center", va="center", rotation=20, fontweight="bold", zorder=0)
    return fig, axes


@styled
def save(fig: Figure, path: Path, tight: bool = False) -> Path:
    """`tight`: the image grows to hold what is drawn outside the axes' fixed margins (a
    legend below the plot, as wide as its labels), at the cost of one more layout pass."""
    path.parent.mkdir(parents=True, exist_ok=True)
    extra = {"bbox_inches": "tight", "pad_inches": 0.15} if tight else {}
    return durable.write_with(path, lambda f: fig.savefig(f, format="png", dpi=DPI,
                                                          facecolor="white", **extra))


def _step_order(run: RunData, extra: Iterable[str] = ()) -> list[str]:
    steps: list[str] = []
    if run.metrics is not None:
        ordered = run.metrics.sort_values(["load_mode", "target"], kind="stable")
        steps = list(dict.fromkeys(ordered["step"]))
    return steps + sorted(set(extra) - set(steps))


def step_colors(n: int) -> list:
    cmap = matplotlib.colormaps["viridis"]
    return [cmap(x) for x in np.linspace(0.0, 0.85, max(n, 1))]


def plain_log(ax, axis: str = "x") -> None:
    """Log scale with plain tick labels (0.01, 1, 100): mathtext is off (STYLE), so the
    default `10^{-2}` labels would print as raw TeX."""
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    a = ax.xaxis if axis == "x" else ax.yaxis
    a.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    a.set_minor_formatter(NullFormatter())


def _log_if_wide(ax, axis: str, values) -> None:
    v = np.asarray([x for x in values if x is not None and np.isfinite(x) and x > 0])
    if len(v) and v.max() / v.min() > 20:
        plain_log(ax, axis)


def _invalid_steps(run: RunData) -> set[str]:
    if run.metrics is None:
        return set()
    return set(run.metrics.loc[~run.metrics["valid"].fillna(False).astype(bool), "step"])


@styled
def plot_cdf(run: RunData, kind: str, slo_s: float | None) -> Figure | None:
    """kind 'ttft' (one sample per request) or 'itl' (per-token, token-weighted)."""
    data = cdf.ttft_cdf(run) if kind == "ttft" else cdf.itl_cdf(run)
    if not data:
        return None
    fig, (ax,) = figure(8, run.emulated)
    steps = _step_order(run, data)
    invalid = _invalid_steps(run)
    for color, step in zip(step_colors(len(steps)), steps, strict=True):
        if step not in data:
            continue
        x, y = data[step]
        label = f"{step} (invalid)" if step in invalid else step
        ax.step(x, y, where="post", color=color, lw=1.8, label=label,
                ls="--" if step in invalid else "-")
    _log_if_wide(ax, "x", np.concatenate([d[0] for d in data.values()]))
    if slo_s is not None:
        what = "TTFT SLO" if kind == "ttft" else "TPOT SLO (reference)"
        ax.axvline(slo_s, color="#444444", ls=":", lw=1.2, label=f"{what} {slo_s:g} s")
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("share of requests" if kind == "ttft" else "share of output tokens")
    ax.set_xlabel("TTFT, client side (s)" if kind == "ttft" else "per-token ITL (s)")
    name = "TTFT CDF per step" if kind == "ttft" else "per-token ITL CDF per step"
    title(ax, f"{name} - {run.run_id}", run.emulated)
    ax.legend(loc="lower right")
    return fig


@styled
def plot_scaling(run: RunData, slo_ttft_s: float | None) -> Figure | None:
    """Output tokens/s and p99 TTFT against concurrency, one point per step."""
    m = run.metrics
    if m is None or m.empty:
        return None
    m = m.sort_values(["load_mode", "target"], kind="stable")
    closed = (m["load_mode"] == "concurrency").all()
    x = m["target"] if closed else m["achieved_concurrency"]
    xlabel = "concurrency (closed loop target)" if closed else "achieved concurrency"
    valid = m["valid"].fillna(False).astype(bool).to_numpy()
    fig, (ax1, ax2) = figure(11, run.emulated, ncols=2)
    for ax, col, ylabel in ((ax1, "output_tok_s", "output tokens/s"),
                            (ax2, "ttft_s_p99", "p99 TTFT (s)")):
        y = m[col].astype(float)
        ax.plot(x, y, color="#1f77b4", lw=1.5, zorder=2)
        ax.scatter(x[valid], y[valid], color="#1f77b4", s=36, zorder=3, label="valid step")
        if (~valid).any():
            ax.scatter(x[~valid], y[~valid], facecolors="white", edgecolors="#d62728", s=50,
                       lw=1.8, zorder=4, label="invalid step (not ranked)")
        for xi, yi, step in zip(x, y, m["step"], strict=True):
            if pd.notna(yi):
                ax.annotate(step, (xi, yi), textcoords="offset points", xytext=(4, 4),
                            fontsize=7, color="#333333")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
    if slo_ttft_s is not None:
        ax2.axhline(slo_ttft_s, color="#444444", ls=":", lw=1.2, label=f"TTFT SLO {slo_ttft_s:g} s")
        ax2.set_ylim(top=max(ax2.get_ylim()[1], slo_ttft_s * 1.08))
    if len(x) and x.max() / max(x.min(), 1e-9) > 20:
        for ax in (ax1, ax2):
            plain_log(ax)
    _suptitle(fig, f"scaling with concurrency - {run.run_id}", run.emulated)
    ax1.set_title("output tokens/s")
    ax2.set_title("p99 TTFT")
    ax1.legend(loc="upper left")
    ax2.legend(loc="upper left")
    return fig


def _label(run: RunData) -> str:
    return f"{run.candidate} (EMULATED)" if run.emulated else run.candidate


@styled
def plot_latency_throughput(runs: list[RunData], slo_ttft_s: float, slo_tpot_s: float) -> Figure:
    """p99 TPOT and p99 TTFT against output tokens/s, every candidate on one chart."""
    emulated = all(r.emulated for r in runs)
    mixed = not emulated and any(r.emulated for r in runs)
    fig, (ax1, ax2) = figure(12, emulated, ncols=2, bottom=0.3)
    ys: dict[str, list] = {"tpot_s_p99": [], "ttft_s_p99": []}
    for i, run in enumerate(runs):
        if run.metrics is None or run.metrics.empty:
            continue
        m = run.metrics.sort_values(["load_mode", "target"], kind="stable")
        color = CANDIDATE_COLORS[i % len(CANDIDATE_COLORS)]
        valid = m["valid"].fillna(False).astype(bool).to_numpy()
        for ax, col in ((ax1, "tpot_s_p99"), (ax2, "ttft_s_p99")):
            x, y = m["output_tok_s"].astype(float), m[col].astype(float)
            ys[col] += list(y)
            ax.plot(x, y, color=color, lw=1.5, marker="o", ms=5, label=_label(run),
                    ls="--" if run.emulated else "-")
            if (~valid).any():
                ax.scatter(x[~valid], y[~valid], facecolors="white", edgecolors=color, s=60,
                           lw=1.8, zorder=4)
            for xi, yi, step in zip(x, y, m["step"], strict=True):
                if pd.notna(yi) and pd.notna(xi):
                    ax.annotate(step, (xi, yi), textcoords="offset points", xytext=(4, 3),
                                fontsize=7, color=color)
    ax1.axhline(slo_tpot_s, color="#444444", ls=":", lw=1.4, label=f"TPOT SLO {slo_tpot_s:g} s")
    ax2.axhline(slo_ttft_s, color="#444444", ls=":", lw=1.4, label=f"TTFT SLO {slo_ttft_s:g} s")
    for ax, col, name in ((ax1, "tpot_s_p99", "p99 TPOT (s)"), (ax2, "ttft_s_p99", "p99 TTFT (s)")):
        _log_if_wide(ax, "y", ys[col])
        ax.set_xlabel("output tokens/s")
        ax.set_ylabel(name)
        ax.set_xlim(left=0)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    _suptitle(fig, "latency vs throughput, latest run of each candidate", emulated, mixed)
    ax1.set_title("p99 TPOT vs output tokens/s (hollow marker = invalid step)")
    ax2.set_title("p99 TTFT vs output tokens/s")
    return fig


@styled
def plot_cost(latest: list[RunData], spread: dict[str, list[float]] | None = None) -> Figure:
    """Cost per 1M output tokens at the SLO operating point, one bar per candidate.

    A candidate that meets the SLO at no step, or has no cost (a gate failed), gets an
    empty hatched bar saying so. `spread` (candidate -> costs of all its runs) adds
    min-max whiskers where a candidate has several runs.
    """
    emulated = all(r.emulated for r in latest)
    mixed = not emulated and any(r.emulated for r in latest)
    fig, (ax,) = figure(9, emulated, bottom=0.2)
    ax.set_axisbelow(True)
    values = []
    for run in latest:
        row = headline_row(run)
        met = row is not None and row["meets_slo"] is not None and not pd.isna(row["meets_slo"]) \
            and bool(row["meets_slo"])
        cost = row["cost_per_1m_output_usd"] if met else None
        values.append(None if cost is None or pd.isna(cost) else float(cost))
    top = max([v for v in values if v is not None], default=1.0)
    for i, (run, value) in enumerate(zip(latest, values, strict=True)):
        color = CANDIDATE_COLORS[i % len(CANDIDATE_COLORS)]
        if value is None:
            row = headline_row(run)
            if row is None:
                why = "no cost: gate failed"
            elif row["meets_slo"] is None or pd.isna(row["meets_slo"]):
                why = "not measured"
            else:
                why = "meets no SLO step"
            ax.bar(i, top * 0.25, color="white", edgecolor="#888888", hatch="//", lw=1.2)
            ax.text(i, top * 0.27, why, ha="center", va="bottom", fontsize=8, color="#555555")
            continue
        ax.bar(i, value, color=color, edgecolor="#333333", lw=0.8,
               hatch="xx" if run.emulated else None)
        costs = [c for c in (spread or {}).get(run.candidate, []) if c is not None]
        if len(costs) > 1:
            ax.errorbar(i, value, yerr=[[value - min(costs)], [max(costs) - value]],
                        color="#1a1a1a", capsize=5, lw=1.2)
        ax.text(i, value, f"${value:,.2f}", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(range(len(latest)), [_label(r) for r in latest], rotation=12, ha="right")
    ax.set_ylabel("USD per 1M output tokens")
    ax.set_ylim(0, top * 1.2)
    title(ax, "cost per 1M output tokens at the SLO operating point", emulated, mixed)
    return fig


@styled
def plot_telemetry(run: RunData) -> Figure | None:
    """The run's telemetry over time (contract §2.5), warm-up and every step's window marked:
    accelerator utilization (mean over devices, min-max shaded, failed samples as red ticks),
    peak memory used as a share of total, total power, and the engine's KV cache and queue."""
    if run.telemetry is None or run.telemetry.num_rows == 0:
        return None
    t = run.telemetry.to_pandas()
    t["at_ns"] = run.telemetry.column("at").cast("int64").to_numpy()
    t0 = int(t["at_ns"].min())
    t["s"] = (t["at_ns"] - t0) / 1e9
    fig, axes = figure(11, run.emulated, nrows=4, height=9.5, bottom=0.06)

    def per_time(metric: str, how: str):
        d = t[(t["metric"] == metric) & t["value"].notna()]
        return d.groupby("s")["value"].agg(how) if not d.empty else None

    ax = axes[0]
    util = t[(t["metric"] == "accel_util") & t["value"].notna()].groupby("s")["value"]
    if len(util):
        mean = util.mean() * 100
        ax.fill_between(mean.index, util.min() * 100, util.max() * 100, color="#1f77b4", alpha=0.2)
        ax.plot(mean.index, mean.values, color="#1f77b4", lw=1.5, label="mean over devices")
    gaps = t.loc[t["metric"] == "sample_error", "s"]
    if len(gaps):
        ax.plot(gaps, np.zeros(len(gaps)), "|", color="#d62728", ms=12, label="failed sample")
    ax.set_ylabel("utilization %")
    ax.set_ylim(-3, 103)
    used = t[t["metric"] == "accel_mem_used_bytes"].set_index(["s", "device"])["value"]
    total = t[t["metric"] == "accel_mem_total_bytes"].set_index(["s", "device"])["value"]
    share = (used / total).dropna()
    if len(share):
        peak = share.groupby(level="s").max() * 100
        axes[1].plot(peak.index, peak.values, color="#9467bd", lw=1.5, label="peak device")
    axes[1].set_ylabel("memory used %")
    power = per_time("power_w", "sum")
    if power is not None:
        axes[2].plot(power.index, power.values, color="#ff7f0e", lw=1.5, label="all devices")
    axes[2].set_ylabel("power W")
    kv = per_time("kv_cache_usage", "max")
    if kv is not None:
        axes[3].plot(kv.index, kv.values * 100, color="#2ca02c", lw=1.5, label="KV cache %")
    for metric, color in (("requests_running", "#1a1a1a"), ("requests_waiting", "#d62728")):
        q = per_time(metric, "sum")
        if q is not None:
            axes[3].plot(q.index, q.values, color=color, lw=1.0, ls="--",
                         label=metric.replace("_", " "))
    axes[3].set_ylabel("KV % / requests")
    axes[3].set_xlabel("seconds since the first sample")
    _mark_steps(run, axes, t0)
    for a, name in zip(axes, ("accelerator utilization", "accelerator memory",
                              "accelerator power", "engine"), strict=True):
        a.set_title(name, fontsize=10, loc="left")
        if a.get_legend_handles_labels()[0]:
            a.legend(loc="upper right")
    _suptitle(fig, f"telemetry - {run.run_id}", run.emulated)
    return fig


def _mark_steps(run: RunData, axes, t0: int) -> None:
    """Warm-up shaded grey; each steady step's window shaded in turn and labelled."""
    spans = []
    warm = (run.manifest.get("phases") or {}).get("warmup") or {}
    if warm.get("started_at") and warm.get("ended_at"):
        spans.append(("warm-up", parse_ts(warm["started_at"]), parse_ts(warm["ended_at"]), "#bbbbbb"))
    if run.metrics is not None:
        for i, m in enumerate(run.metrics.sort_values("window_start").itertuples(index=False)):
            if pd.notna(m.window_start) and pd.notna(m.window_end):
                spans.append((m.step, pd.Timestamp(m.window_start).value,
                              pd.Timestamp(m.window_end).value, ("#e8f0fb", "#fdf0e0")[i % 2]))
    for name, lo, hi, color in spans:
        a, b = (lo - t0) / 1e9, (hi - t0) / 1e9
        for ax in axes:
            ax.axvspan(a, b, color=color, alpha=0.5, zorder=0, lw=0)
            ax.axvline(a, color="#777777", lw=0.6, ls=":")
        axes[0].annotate(name, (a, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -10),
                         textcoords="offset points", fontsize=7, color="#333333")


def write_run_plots(run: RunData, out_dir: Path, slo_ttft_s: float, slo_tpot_s: float
                    ) -> dict[str, Path]:
    """Draw the per-run plots into `out_dir`; name -> PNG path (plots without data skipped)."""
    figs = {
        "ttft_cdf": plot_cdf(run, "ttft", slo_ttft_s),
        "itl_cdf": plot_cdf(run, "itl", slo_tpot_s),
        "scaling": plot_scaling(run, slo_ttft_s),
        "telemetry": plot_telemetry(run),
    }
    return {name: save(fig, out_dir / f"{name}.png") for name, fig in figs.items() if fig}


def write_comparison_plots(runs: list[RunData], out_dir: Path, slo_ttft_s: float,
                           slo_tpot_s: float) -> dict[str, Path]:
    """Latency-throughput and cost bars across the latest run of each candidate."""
    latest = latest_per_candidate(runs)
    spread: dict[str, list[float]] = {}
    for run in runs:
        row = headline_row(run)
        if row and row["meets_slo"] and pd.notna(row["cost_per_1m_output_usd"]):
            spread.setdefault(run.candidate, []).append(float(row["cost_per_1m_output_usd"]))
    return {
        "latency_throughput": save(plot_latency_throughput(latest, slo_ttft_s, slo_tpot_s),
                                    out_dir / "latency_throughput.png"),
        "cost_per_1m": save(plot_cost(latest, spread), out_dir / "cost_per_1m.png"),
    }
