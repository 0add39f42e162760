"""Episodes and spot runs on the comparison page (contract §3.7, §3.8): the latest episode of
each candidate side by side (episode.json: attainment, replica-hours, idle cost, cost per 1M
over the whole episode, beside the autoscaler settings that made it), the cost-per-1M
against SLO-attainment frontier over those settings (a plot and its table), and the spot
against on-demand pairs of spot_pairs.parquet with what each spot run's interruptions cost.

An episode's point is its whole steady phase (episode.json); a run without episode.json
contributes its frontier.parquet steps instead (each a point with the step's attainment and
billed cost). Measured and emulated points are never on one curve.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from servingbench.resources.analysis.spot import pairs_of_folders
from servingbench.resources.report import sections as s
from servingbench.resources.report.comparison import run_link
from servingbench.resources.report.episode_section import read_rows, read_summary, source_badge
from servingbench.resources.report.html import cell, image, para, table
from servingbench.resources.report.plots import (
    CANDIDATE_COLORS,
    EMULATED_COLOR,
    figure,
    save,
    styled,
    title,
)
from servingbench.resources.report.registry import Plots, Section
from servingbench.resources.report.rundata import RunData, latest_per_candidate

# the autoscaler settings a sweep varies to draw the curve (pipelines/sweeps.py's keys)
SETTINGS = ("autoscaling.target", "autoscaling.scale_down_cooldown_s", "replicas.min")


def setting(manifest: dict, key: str):
    part, name = key.split(".")
    return (manifest.get(part) or {}).get(name)


def settings_text(manifest: dict) -> str | None:
    parts = [f"{k.split('.')[-1]}={v}" for k in SETTINGS
             if (v := setting(manifest, k)) is not None]
    return ", ".join(parts) or None


def points(latest: list[RunData]) -> list[dict]:
    """One point per episode (episode.json) and per analysed step of a run without one
    (frontier.parquet): candidate, run, step, source, attainment, billed cost per 1M; a point
    with either null is left out (no bill, no request)."""
    out = []
    for run in latest:
        source = "emulated" if run.emulated else "measured"
        ep = read_summary(run.run_dir)
        if ep is not None:
            rows = [("episode", ep.get("slo_attainment"), ep.get("cost_per_1m_output_usd"))]
        elif run.frontier is not None and "slo_attainment" in run.frontier:
            rows = [(r["step"], r["slo_attainment"], r["cost_per_1m_output_usd"])
                    for r in run.frontier.to_dict("records") if r["valid"]]
        else:
            rows = []
        for step, att, cost in rows:
            if att is None or cost is None or np.isnan(att) or np.isnan(cost):
                continue
            out.append({"run": run, "candidate": run.candidate, "step": step, "source": source,
                        "attainment": float(att), "cost": float(cost)})
    return on_curve(out)


def on_curve(pts: list[dict]) -> list[dict]:
    """Marks each point `on_curve`: no other point of its source has attainment ≥ and cost ≤
    with one strictly better (the cheapest way to each attainment)."""
    for p in pts:
        p["on_curve"] = not any(
            q is not p and q["source"] == p["source"] and q["attainment"] >= p["attainment"]
            and q["cost"] <= p["cost"] and (q["attainment"] > p["attainment"]
                                            or q["cost"] < p["cost"]) for q in pts)
    return pts


@styled
def plot_cost_attainment(pts: list[dict]):
    if not pts:
        return None
    emulated = all(p["source"] == "emulated" for p in pts)
    mixed = not emulated and any(p["source"] == "emulated" for p in pts)
    fig, (ax,) = figure(8.0, emulated, height=5.0)
    for i, source in enumerate(("measured", "emulated")):
        mine = sorted((p for p in pts if p["source"] == source), key=lambda p: p["attainment"])
        if not mine:
            continue
        color = EMULATED_COLOR if source == "emulated" else CANDIDATE_COLORS[0]
        curve = [p for p in mine if p["on_curve"]]
        ax.plot([p["attainment"] * 100 for p in curve], [p["cost"] for p in curve], color=color,
                marker="o", label=f"{source.upper() if source == 'emulated' else source}: "
                                  "cheapest at each attainment")
        rest = [p for p in mine if not p["on_curve"]]
        ax.scatter([p["attainment"] * 100 for p in rest], [p["cost"] for p in rest],
                   facecolors="none", edgecolors=color, label=f"{source}: beaten")
        for p in mine:
            label = settings_text(p["run"].manifest) or p["candidate"]
            # to the left of the point: attainment ends at 100 %, the right edge
            ax.annotate(label, (p["attainment"] * 100, p["cost"]), fontsize=7, ha="right",
                        xytext=(-6, 4 + 6 * i), textcoords="offset points")
    lo = min(p["attainment"] for p in pts) * 100
    ax.set_xlim(max(0.0, lo - max(2.0, (100 - lo) * 0.1)), 100.5)  # attainment ends at 100 %
    ax.set_xlabel("SLO attainment over the episode (%)")
    ax.set_ylabel("billed USD per 1M output tokens")
    ax.legend(loc="upper left", fontsize=8)
    title(ax, "Cost per 1M vs SLO attainment over autoscaler settings", emulated, mixed)
    return fig


def write_plots(runs: list[RunData], out_dir: Path, slo, levels) -> dict[str, Path]:
    latest = latest_per_candidate(runs)
    if not any(read_summary(r.run_dir) for r in latest):
        return {}  # no episode: the section is left out, so is its plot
    fig = plot_cost_attainment(points(latest))
    return {} if fig is None else {"cost_attainment": save(fig, out_dir / "cost_attainment.png")}


def episodes_table(latest: list[RunData], page_dir: Path | None) -> str | None:
    rows = []
    for run in latest:
        ep = read_summary(run.run_dir)
        if ep is None:
            continue
        rs, idle = ep["replica_seconds"], ep["idle_replica_seconds"]
        rows.append([cell(run.candidate), run_link(run, page_dir), source_badge(run),
                     cell(settings_text(run.manifest)), s.share(ep["slo_attainment"]),
                     s.n(None if rs is None else rs / 3600),
                     s.n(None if idle is None else idle / 3600), s.n(ep["node_hours"]),
                     cell(f"{ep['scale_ups']} / {ep['scale_downs']}"),
                     s.n(ep["cold_start_s_max"]), s.small_money(ep["window_cost_usd"]),
                     s.small_money(ep["idle_cost_usd"]),
                     s.small_money(ep["cost_per_1m_output_usd"]), cell(ep["bill_status"])])
    if not rows:
        return None
    return table(("candidate", "run", "source", "autoscaler settings", "SLO attainment",
                  "replica-hours", "idle replica-hours", "node-hours", "scale-ups / downs",
                  "longest cold start (s)", "billed cost", "idle cost",
                  "USD / 1M output tok (episode)", "bill"), rows) + para(
        "Each candidate's latest episode over its whole steady phase (episode.json): idle and "
        "drain time included in the cost, idle cost = the bill × idle replica-time ÷ "
        "replica-time.")


def frontier_body(latest: list[RunData], plots: dict[str, Path]) -> str | None:
    pts = points(latest)
    if not pts or not any(read_summary(r.run_dir) for r in latest):
        return None
    rows = [[cell(p["candidate"]), cell(p["step"]),
             s.source_cell(p["run"]), cell(settings_text(p["run"].manifest)),
             s.share(p["attainment"]), s.small_money(p["cost"]),
             cell("cheapest at this attainment" if p["on_curve"] else "beaten")]
            for p in sorted(pts, key=lambda p: (p["source"], -p["attainment"], p["cost"]))]
    fig = image(plots["cost_attainment"], "cost vs attainment") if "cost_attainment" in plots \
        else ""
    return fig + table(("candidate", "episode / step", "source", "autoscaler settings",
                        "SLO attainment", "billed USD / 1M output tok", "curve"), rows) + para(
        "A point is on the curve when no other point of its source reaches at least its "
        "attainment for no more cost. Runs without a bill or a request are left out; "
        "measured and emulated points are never compared.")


def _recovery(run_dir: Path) -> tuple[list[float], float | None]:
    """The spot run's recovery seconds (each interruption → its replacement ready) and the
    SLO attainment of the requests sent in the buckets from a notice to the replacement's
    ready (episode.parquet, weighted by requests), None when unknown."""
    cuts = read_rows(run_dir, "interruptions") or []
    buckets = read_rows(run_dir, "episode") or []
    secs, n, met = [], 0, 0.0
    for c in cuts:
        if c["interrupted_at"] is None or c["replacement_ready_s"] is None:
            continue
        secs.append(c["replacement_ready_s"])
        a = c["notice_at"].value
        b = c["interrupted_at"].value + int(max(c["replacement_ready_s"], 0) * 1e9)
        for k in buckets:
            if k["bucket_start"].value < b and k["bucket_end"].value > a \
                    and k["n_requests"] and k["slo_attainment"] is not None:
                n += k["n_requests"]
                met += k["slo_attainment"] * k["n_requests"]
    return secs, (met / n if n else None)


def spot_table(runs: list[RunData], page_dir: Path | None) -> str | None:
    pairs = pairs_of_folders([r.run_dir for r in runs], skip_broken=True).to_pylist()
    if not pairs:
        return None
    by_id = {r.run_id: r for r in runs}
    rows = []
    for p in pairs:
        spot = by_id.get(p["spot_run_id"])
        secs, during = _recovery(spot.run_dir) if spot is not None else ([], None)
        per = (p["lost"] / p["interruptions"]) if p["interruptions"] else None
        rows.append([cell(p["candidate"]),
                     s.source_cell(spot) if spot is not None else cell(p["source"]),
                     s.small_money(p["on_demand_cost_per_1m_output_usd"]),
                     s.small_money(p["spot_cost_per_1m_output_usd"]),
                     s.share(p["effective_discount"]), s.share(p["what_if_spot_discount"]),
                     s.n(p["interruptions"]), s.n(p["lost"]), s.n(per),
                     s.n(max(secs) if secs else None), s.share(during)])
    return table(("candidate", "source", "on-demand billed USD / 1M", "spot billed USD / 1M",
                  "effective discount", "what-if spot discount (price list)", "interruptions",
                  "requests lost", "lost per interruption", "recovery (s, longest)",
                  "attainment during recovery"), rows) + para(
        "spot_pairs.parquet: each side's billed cost per 1M output tokens over its whole "
        "steady phase. The effective discount is what the spot run really saved, lost "
        "requests and the replacement's paid cold start included; the what-if discount is "
        "the price list's alone, never billed. Recovery: an interruption to its "
        "replacement's first ready replica; attainment during recovery is over the requests "
        "sent in the buckets from the notice to that ready.")


SECTIONS = (
    Section("comparison", 25, "Episodes side by side (whole steady phase)", "episodes",
            lambda p: episodes_table(p.latest, p.page_dir)),
    Section("comparison", 26, "Cost per 1M vs SLO attainment over autoscaler settings",
            "cost-attainment", lambda p: frontier_body(p.latest, p.plots)),
    Section("comparison", 27, "Spot against on-demand", "spot",
            lambda p: spot_table(p.runs, p.page_dir)),
)
DRAWS = (Plots("comparison", 30, write_plots),)

PLUGIN = (*SECTIONS, *DRAWS)  # what this file adds to the report package
