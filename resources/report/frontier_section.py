"""The comparison's frontier section (contract §3.6, §4.1): the two plots and the table
"cheapest candidate at each interactivity level" with the runner-up and the ratio."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
from servingbench.resources.analysis.frontier import cheapest_by_level
from servingbench.resources.report import sections as s
from servingbench.resources.report.frontier_plots import (
    plot_frontier_cost,
    plot_frontier_throughput,
)
from servingbench.resources.report.html import badge, cell, image, para, table
from servingbench.resources.report.plots import save
from servingbench.resources.report.registry import Plots, Section
from servingbench.resources.report.rundata import RunData, latest_per_candidate

PLOTS = {"frontier_throughput": plot_frontier_throughput, "frontier_cost": plot_frontier_cost}
CAPTIONS = {
    "frontier_throughput": "One line per candidate (a sweep on one instance type is one line): "
                           "its frontier, the steps no other valid step beats on both axes. "
                           "Dots: other valid steps; hollow: invalid steps, never joined; "
                           "dotted verticals: the interactivity levels of the table below.",
    "frontier_cost": "Billed (solid): from the run's accepted bill. What-if (hatched band, "
                     "never billed): the same tokens at each price basis of the run's manifest, "
                     "cheapest to dearest. No line: no accepted bill.",
}


def write_plots(latest: Sequence[RunData], out_dir: Path, levels: Sequence[float]
                ) -> dict[str, Path]:
    figs = {name: fn(latest, levels) for name, fn in PLOTS.items()}
    # tight: the legends below the plots are as wide as the candidates' names make them
    return {name: save(fig, out_dir / f"{name}.png", tight=True)
            for name, fig in figs.items() if fig}


def _source(value) -> object:
    return badge("EMULATED", "emulated") if value == "emulated" else cell(value)


def cheapest_table(levels: pa.Table, slo_ttft_s: float,
                   bands: dict[str, float | None] | None = None) -> str:
    rows, classes = [], []
    for r in cheapest_by_level(levels.to_pylist(), bands):
        # two emulated candidates within each other's error bands: no winner is named
        cheapest = (f"{r['cheapest']} or {r['runner_up']} (within error bands)"
                    if r["within_bands"] else r["cheapest"])
        rows.append([s.n(r["level_tok_s"]), _source(r["source"]),
                     cell(f"{r['reached']} of {r['of']}"), cell(cheapest), cell(r["step"]),
                     s.money(r["cost_per_1m_output_usd"]), cell(r["runner_up"]),
                     s.money(r["runner_up_cost_per_1m_output_usd"]),
                     cell(None if r["ratio"] is None else f"{r['ratio']:.2f}\u00d7")])
        classes.append("emulated" if r["source"] == "emulated" else "")
    return table(("interactivity \u2265 (tok/s per user)", "source", "candidates reaching it",
                  "cheapest", "step", "USD / 1M output tok", "runner-up", "runner-up USD / 1M",
                  "runner-up costs"), rows, classes) + para(
        f"At each level, each candidate's cheapest valid step whose interactivity (1 / p50 "
        f"TPOT) reaches it and whose p99 TTFT is within {slo_ttft_s:g} s; measured steps "
        "only, never interpolated. Billed cost of the latest accepted run; measured and "
        "emulated are ranked apart, a candidate that failed quality parity is never ranked; "
        "two emulated candidates within each other's error bands (the emulator's "
        "cross-validated error, docs/emulator.md) are both named, neither as the cheaper.")


def grid_table(levels: pa.Table) -> str:
    rows = levels.to_pylist()
    values = sorted({r["level_tok_s"] for r in rows})
    by = {(r["candidate"], r["level_tok_s"]): r for r in rows}
    candidates = sorted({(r["source"] != "emulated", r["candidate"]) for r in rows}, reverse=True)
    out = []
    for _, cand in candidates:
        line = [cell(cand)]
        for v in values:
            r = by.get((cand, v))
            if r is None or r["step"] is None:
                line.append(cell("does not reach"))
            else:
                cost = s.money(r["cost_per_1m_output_usd"]).html
                line.append(cell(f"{cost} @ {r['step']}" + (f" (#{r['rank']})" if r["rank"] else "")))
        out.append(line)
    return table(["candidate"] + [f"\u2265 {v:g} tok/s" for v in values], out) + para(
        "USD per 1M output tokens (billed) of each candidate's pick at each level, its step and "
        "its rank; \u2014 means reached without an accepted bill.")


def section_body(levels: pa.Table, plots: dict[str, Path], slo_ttft_s: float,
                 bands: dict[str, float | None] | None = None) -> str:
    figs = "".join(image(plots[name], name.replace("_", " "), CAPTIONS[name])
                   for name in PLOTS if name in plots)
    if not figs:
        figs = para("No run has a frontier (no analysed step).")
    return figs + cheapest_table(levels, slo_ttft_s, bands) + grid_table(levels)


def run_section(run: RunData) -> str:
    """One run's frontier (contract §3.6) and its what-if costs (§4.1), apart from the bill."""
    out = []
    f = run.frontier
    if f is None or f.empty:
        out.append(para("No frontier: the run has not been analysed."))
    else:
        rows, classes = [], []
        for r in f.to_dict("records"):
            rows.append([cell(r["step"]), s.n(r["interactivity_tok_s"]),
                         s.n(r["output_tok_s_per_accel"]), s.n(r.get("total_tok_s_per_accel")),
                         s.money(r["cost_per_1m_output_usd"]),
                         s.money(r.get("cost_per_1m_total_usd")),
                         badge("on the frontier", "ok") if r["on_frontier"] else cell(None)])
            classes.append("" if r["valid"] else "invalid")
        out.append(table(("step", "interactivity (tok/s per user)",
                          "output tok/s per accelerator", "total tok/s per accelerator",
                          "billed USD / 1M output", "billed USD / 1M total", "frontier"),
                         rows, classes))
    w = run.what_if
    if w is not None and not w.empty:
        rows = [[cell(r["step"]), cell(r["basis"]), cell(r["price_source"]),
                 cell(r["retrieved_on"]), s.money(r["hourly_usd_per_node"]),
                 s.money(r["cost_per_1m_output_usd"]), s.money(r["cost_per_1m_total_usd"])]
                for r in w.to_dict("records")]
        out.append(table(("step", "WHAT-IF basis", "price source", "retrieved on",
                          "USD / node-hour", "what-if USD / 1M output", "what-if USD / 1M total"),
                         rows) + para(
            "WHAT-IF: the same tokens priced at other bases from the manifest's price_bases "
            "(node count × hourly price × the step's window); never billed, never "
            "ranked. price_sheet prices are unverified."))
    return "\n".join(out)


SECTIONS = (
    Section("run", 70, "Frontier and what-if prices (not billed)", "frontier",
            lambda p: run_section(p.run)),
    Section("comparison", 20, "Frontier: what each level of interactivity costs", "frontier",
            lambda p: None if p.levels is None else section_body(
                p.levels, p.plots, p.slo[0], {r.candidate: r.band for r in p.latest})),
)

DRAWS = (
    Plots("comparison", 10, lambda runs, out_dir, slo, levels: write_plots(
        latest_per_candidate(runs), out_dir, levels)),
)


PLUGIN = (*SECTIONS, *DRAWS)  # what this file adds to the report package
