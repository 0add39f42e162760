"""Several models on one node in the run report (contract §3.9): the per-model table (TTFT p99
during and outside another model's swap, cost attributed by awake time or memory share,
labelled attributed beside the node's billed cost), the swap timeline over the request
stream, and where the models sit in each accelerator's memory (the manifest's
`models[].memory_share`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from servingbench.resources.report import sections as s
from servingbench.resources.report.episode_section import read_rows
from servingbench.resources.report.html import cell, para, table
from servingbench.resources.report.plots import CANDIDATE_COLORS, figure, save, styled, title
from servingbench.resources.report.registry import Plots, Section
from servingbench.resources.report.rundata import RunData

SWAP_ALPHA = {"model_load": 0.35, "model_wake": 0.35, "model_sleep": 0.12}


def models_of(run: RunData) -> list[dict]:
    return list(run.manifest.get("models") or [])


def colors(models: list[dict]) -> dict[str, str]:
    return {m["name"]: CANDIDATE_COLORS[i % len(CANDIDATE_COLORS)] for i, m in enumerate(models)}


def accelerators(run: RunData) -> int:
    return int(run.manifest.get("accelerators_per_node") or 1)


def placement_rows(models: list[dict]) -> list[tuple[str, float]]:
    """Each model's memory share on every accelerator of the node, then the remainder (free
    or unattributed), as (name, share); a share the manifest leaves null counts 0."""
    out = [(m["name"], float(m.get("memory_share") or 0.0)) for m in models]
    rest = 1.0 - sum(v for _, v in out)
    return out + ([("free / unattributed", rest)] if rest > 1e-9 else [])


@styled
def plot_swaps(run: RunData):
    models = models_of(run)
    req = run.requests
    if not models or req is None or "model" not in req.column_names or req.num_rows == 0:
        return None
    swaps = read_rows(run.run_dir, "swaps") or []
    names = [m["name"] for m in models]
    col = colors(models)
    sent = np.array(req["sent_at"].cast("int64").to_numpy(zero_copy_only=False), dtype=float)
    first = req["first_token_at"].cast("int64").to_numpy(zero_copy_only=False)
    t0 = float(np.nanmin(sent))
    model = req["model"].to_pylist()
    ok = [st == "ok" for st in req["status"].to_pylist()]
    fig, (ax,) = figure(10.0, run.emulated, height=4.2)
    for sw in swaps:
        if sw["model"] not in names:
            continue
        y = names.index(sw["model"])
        a = (sw["started_at"].value - t0) / 1e9
        ax.barh(y, sw["seconds"], left=a, height=0.8, color=col[sw["model"]],
                alpha=SWAP_ALPHA.get(sw["kind"], 0.2), edgecolor="#333333", linewidth=0.5)
        ax.text(a, y + 0.42, sw["kind"].removeprefix("model_"), fontsize=7, color="#333333")
    for i, name in enumerate(names):
        idx = [k for k, m in enumerate(model) if m == name]
        if not idx:
            continue
        xs = (sent[idx] - t0) / 1e9
        ttft = np.array([(first[k] - sent[k]) / 1e9 if ok[k] and first[k] is not None
                         else np.nan for k in idx], dtype=float)
        # each request a dot at its model's row, lifted by its TTFT (scaled into the row)
        top = np.nanmax(ttft) if np.isfinite(ttft).any() else 1.0
        ax.scatter(xs, i - 0.35 + 0.7 * np.nan_to_num(ttft / (top or 1.0), nan=0.0), s=6,
                   color=col[name], label=f"{name} (TTFT max {top:.3g} s)", zorder=3)
        bad = np.isnan(ttft)
        if bad.any():
            ax.scatter(xs[bad], np.full(bad.sum(), i - 0.35), marker="x", s=14,
                       color="#b00020", zorder=4)
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("seconds after the first steady request")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_ylim(-0.6, len(names) - 0.4)
    title(ax, "Swaps over the request stream", run.emulated)
    return fig


@styled
def plot_placement(run: RunData):
    models = models_of(run)
    if not models:
        return None
    rows = placement_rows(models)
    col = colors(models) | {"free / unattributed": "#eeeeee"}
    n = accelerators(run)
    fig, (ax,) = figure(7.0, run.emulated, height=1.8 + 0.45 * n)
    fig.subplots_adjust(left=0.16, bottom=0.6 / (1.8 + 0.45 * n), top=1 - 0.45 / (1.8 + 0.45 * n))
    for acc in range(n):
        left = 0.0
        for name, share in rows:
            ax.barh(acc, share, left=left, color=col[name], edgecolor="#555555", linewidth=0.5,
                    label=name if acc == 0 else None)
            if share >= 0.08:
                ax.text(left + share / 2, acc, f"{name} {share:.0%}", ha="center",
                        va="center", fontsize=8)
            left += share
    ax.set_yticks(range(n), [f"accelerator {i}" for i in range(n)])
    ax.set_xlim(0, max(1.0, sum(v for _, v in rows)))
    ax.set_xlabel("share of the accelerator's memory (manifest models[].memory_share)")
    placements = sorted({m.get("placement") or "?" for m in models})
    title(ax, f"Memory placement ({', '.join(placements)})", run.emulated)
    return fig


def write_plots(run: RunData, out_dir: Path, slo_ttft_s: float, slo_tpot_s: float
                ) -> dict[str, Path]:
    out = {}
    for name, fn in (("model_swaps", plot_swaps), ("model_placement", plot_placement)):
        fig = fn(run)
        if fig is not None:
            out[name] = save(fig, out_dir / f"{name}.png")
    return out


CAPTIONS = {
    "model_swaps": ("swap timeline over the request stream", "One row per model: its loads, "
                    "wakes and sleeps (swaps.parquet) as bars, each of its steady requests a "
                    "dot at its send time, higher the slower its TTFT; failed requests are x."),
    "model_placement": ("memory placement per accelerator", "Each model's memory_share of "
                        "the manifest on each accelerator of the node; the remainder is free "
                        "or unattributed. A swapped model holds its share only while awake."),
}


def run_section(run: RunData) -> str | None:
    models = models_of(run)
    rows = read_rows(run.run_dir, "derived_metrics_by_model")
    if not models or rows is None:
        return None
    placement = {m["name"]: m for m in models}
    billed = {c.step: c.cost_per_1m_output_usd for c in run.cost.itertuples(index=False)} \
        if run.cost is not None else {}
    out = [[cell(r["step"]), cell(r["model"]), cell(placement.get(r["model"], {}).get("placement")),
            s.share(placement.get(r["model"], {}).get("memory_share")), s.n(r["n_requests"]),
            s.n(r["n_ok"]), s.n(r["output_tok_s"]), s.n(r["ttft_s_p99"]),
            s.n(r["ttft_s_p99_during_swap"]), s.n(r["ttft_s_p99_outside_swap"]),
            s.small_money(r["attributed_cost_per_1m_output_usd"]),
            s.small_money(billed.get(r["step"]))] for r in rows]
    return table(("step", "model", "placement", "memory share", "requests", "ok",
                  "output tok/s", "TTFT p99", "TTFT p99 during another's swap",
                  "TTFT p99 outside swaps", "ATTRIBUTED USD / 1M output tok",
                  "node's BILLED USD / 1M output tok (all models)"), out) + para(
        "derived_metrics_by_model.parquet. The bill covers the node, never one model: the "
        "attributed cost splits the step's billed window cost by memory share (resident) or "
        "awake time (swapped), so it is an attribution, not a bill; the shares need not add "
        "to 1 and the rest is the node's unattributed cost. The billed column counts every "
        "model's tokens.")


SECTIONS = (
    Section("run", 36, "Several models on one node: per model, swaps, placement", "models",
            lambda p: run_section(p.run)),
)
DRAWS = (Plots("run", 50, write_plots, CAPTIONS),)

PLUGIN = (*SECTIONS, *DRAWS)  # what this file adds to the report package
