"""An episode in the run report (contract §3.7, §3.8): one figure read at a glance and the
tables behind it.

The figure shares one time axis (seconds after the steady phase's start) across four panels:
offered and completed requests/s (episode.parquet), ready replicas and nodes, TTFT p99 per
bucket against the SLO, and each scale-up's cold start as a stacked bar from its decision
(scale_events.parquet: the wait before the replica's phases, then image pull, weights load,
compile and graph capture, a tick at its first token). Every panel carries the scale
decisions and, for a spot run, the interruption notices and interruptions (events.parquet),
so a latency spike lines up with what caused it.

The readers here are also what the comparison's episode sections and `servingbench demo`'s
summary read: absent files are None, never an error (a run that is no episode has none).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from servingbench.resources.contract import run_files
from servingbench.resources.contract.timestamps import parse_ts
from servingbench.resources.report import sections as s
from servingbench.resources.report.html import badge, cell, kv_table, para, table
from servingbench.resources.report.plots import EMULATED_COLOR, figure, save, styled, title
from servingbench.resources.report.registry import Plots, Section
from servingbench.resources.report.rundata import ReportError, RunData

PHASES = ("image_pull_s", "weights_load_s", "compile_s", "graph_capture_s")
PHASE_COLORS = {"wait_s": "#cccccc", "image_pull_s": "#1f77b4", "weights_load_s": "#ff7f0e",
                "compile_s": "#2ca02c", "graph_capture_s": "#9467bd"}
# vertical marks: scale decisions that changed the count (scale_events), spot events (events)
MARKS = {"up": ("#2ca02c", "-"), "down": ("#7f7f7f", "-"),
         "interruption_notice": ("#ff7f0e", "--"), "interruption": (EMULATED_COLOR, "-")}


def read_rows(run_dir: Path, name: str) -> list[dict] | None:
    """`<name>.parquet` of the run folder as rows (timestamps as pandas Timestamps), None
    when absent."""
    path = Path(run_dir) / f"{name}.parquet"
    return pq.read_table(path).to_pylist() if path.exists() else None


def read_summary(run_dir: Path) -> dict | None:
    """episode.json, through the contract's one reader; a malformed one stops the report."""
    try:
        return run_files.read_episode(run_dir)
    except run_files.RunFileError as exc:
        raise ReportError(str(exc)) from None


def steady_start_ns(manifest: dict, buckets: list[dict] | None) -> int | None:
    steady = (manifest.get("phases") or {}).get("steady") or {}
    if steady.get("started_at"):
        return parse_ts(steady["started_at"])
    return buckets[0]["bucket_start"].value if buckets else None


def _secs(ts, t0: int) -> float:
    return (ts.value - t0) / 1e9


def cold_start_bars(scale: list[dict]) -> list[dict]:
    """Each scale-up's stacked bar: `at` (the decision), the segments in order (`wait_s`: the
    decision to its replica's ready less the known phases, at least 0; then each phase's
    seconds, 0 when unknown) and `first_token_s` (decision → first token, or None)."""
    out = []
    for e in scale:
        if e["direction"] != "up":
            continue
        phases = {p: e[p] or 0.0 for p in PHASES}
        ready = e["replica_ready_s"]
        wait = max(0.0, (ready or 0.0) - sum(phases.values())) if ready is not None else 0.0
        out.append({"at": e["decided_at"], "segments": {"wait_s": wait, **phases},
                    "ready_s": ready, "first_token_s": e["first_token_s"]})
    return out


def marks(scale: list[dict], events: list[dict]) -> list[tuple[str, object]]:
    """What the figure draws as vertical lines: (kind, when) for each scale decision that
    changed the count (its direction) and each interruption notice and interruption."""
    return ([(e["direction"], e["decided_at"]) for e in scale]
            + [(ev["kind"], ev["at"]) for ev in events
               if ev["kind"] in ("interruption_notice", "interruption")])


def _mark(axes, lines: list[tuple[str, object]], t0: int) -> None:
    for kind, at in lines:
        color, style = MARKS[kind]
        for ax in axes:
            ax.axvline(_secs(at, t0), color=color, linestyle=style, linewidth=1.0,
                       alpha=0.75, zorder=1)


@styled
def plot_episode(run: RunData, slo_ttft_s: float | None):
    buckets = read_rows(run.run_dir, "episode")
    if not buckets:
        return None
    t0 = steady_start_ns(run.manifest, buckets)
    events = run_files.read_events(run.run_dir, run.run_id)
    events = [] if events is None else events.to_pylist()
    scale = read_rows(run.run_dir, "scale_events") or []
    mid = np.array([(_secs(b["bucket_start"], t0) + _secs(b["bucket_end"], t0)) / 2
                    for b in buckets])

    def col(name):
        return np.array([np.nan if b[name] is None else b[name] for b in buckets], dtype=float)

    fig, (load, fleet, ttft, cold) = figure(10.0, run.emulated, nrows=4, height=9.0,
                                            bottom=0.07)
    fig.subplots_adjust(hspace=0.45, top=0.95)
    load.plot(mid, col("offered_rps"), color="#1f77b4", label="offered req/s")
    load.plot(mid, col("completed_rps"), color="#2ca02c", label="completed req/s")
    load.set_ylabel("requests/s")
    fleet.step(mid, col("replicas_ready"), where="mid", color="#9467bd", label="ready replicas")
    fleet.step(mid, col("nodes"), where="mid", color="#8c564b", linestyle="--", label="nodes")
    fleet.set_ylabel("count (bucket mean)")
    ttft.plot(mid, col("ttft_s_p99"), color="#d62728", marker=".", label="TTFT p99")
    if slo_ttft_s is not None:
        ttft.axhline(slo_ttft_s, color="#555555", linestyle=":", label=f"SLO {slo_ttft_s:g} s")
    ttft.set_ylabel("seconds")
    bars = cold_start_bars(scale)
    seen: set[str] = set()
    for i, b in enumerate(bars):
        left = _secs(b["at"], t0)
        for name, width in b["segments"].items():
            if width > 0:
                cold.barh(i, width, left=left, color=PHASE_COLORS[name], height=0.6,
                          label=None if name in seen else name.removesuffix("_s").replace("_", " "))
                seen.add(name)
                left += width
        if b["first_token_s"] is not None:
            cold.plot(_secs(b["at"], t0) + b["first_token_s"], i, marker="|", color="black",
                      markersize=12, label="first token" if i == 0 else None)
    cold.set_ylabel("scale-up #")
    cold.set_yticks(range(len(bars)))
    cold.set_ylim(-0.6, max(len(bars), 1) - 0.4 + 0.8)
    if not bars:
        cold.text(0.5, 0.5, "no scale-up in this episode", transform=cold.transAxes,
                  ha="center", va="center", color="#555555")
    cold.set_xlabel("seconds after the steady phase's start")
    _mark((load, fleet, ttft, cold), marks(scale, events), t0)
    end = max([mid.max() if len(mid) else 0.0]
              + [_secs(b["at"], t0) + sum(b["segments"].values()) for b in bars])
    for ax in (load, fleet, ttft, cold):
        ax.set_xlim(0, end * 1.02 or 1.0)
        handles, labels = ax.get_legend_handles_labels()
        if handles:
            ax.legend(handles, labels, loc="upper left", ncols=min(len(labels), 6),
                      fontsize=8)
    title(load, "Episode on one time axis: load, replicas, TTFT p99, cold starts",
          run.emulated)
    return fig


CAPTION = ("Top: offered (scheduled, resends excluded) and completed requests/s per bucket. "
           "Then ready replicas and nodes (time-weighted means per bucket), TTFT p99 of the "
           "requests sent in each bucket against the SLO, and each scale-up as one bar from "
           "its decision: grey is the wait before the replica's start-up phases (node, "
           "scheduling), then image pull, weights load, compile, graph capture, to ready; the "
           "black tick is its first token. Vertical lines: green scale-ups and grey "
           "scale-downs (decisions that changed the count), orange dashed interruption "
           "notices, red interruptions (spot runs).")


def write_plots(run: RunData, out_dir: Path, slo_ttft_s: float, slo_tpot_s: float
                ) -> dict[str, Path]:
    fig = plot_episode(run, slo_ttft_s)
    return {} if fig is None else {"episode": save(fig, out_dir / "episode.png")}


def source_badge(run: RunData):
    return badge("EMULATED", "emulated") if run.emulated else badge("MEASURED", "ok")


def summary_table(summary: dict, run: RunData) -> str:
    rs = summary["replica_seconds"]
    facts = [("source", source_badge(run)), ("duration (s)", s.n(summary["duration_s"])),
             ("requests / ok", f"{summary['requests']} / {summary['ok']}"),
             ("SLO attainment (all steady requests)", s.share(summary["slo_attainment"])),
             ("replica-hours", s.n(None if rs is None else rs / 3600)),
             ("idle replica-hours", s.n(None if summary["idle_replica_seconds"] is None
                                        else summary["idle_replica_seconds"] / 3600)),
             ("node-hours", s.n(summary["node_hours"])),
             ("scale-ups / scale-downs", f"{summary['scale_ups']} / {summary['scale_downs']}"),
             ("longest cold start (s)", s.n(summary["cold_start_s_max"])),
             ("billed cost over the episode", s.small_money(summary["window_cost_usd"])),
             ("idle cost (share of the bill)", s.small_money(summary["idle_cost_usd"])),
             ("USD / 1M output tok over the episode",
              s.small_money(summary["cost_per_1m_output_usd"])),
             ("bill", cell(summary["bill_status"]))]
    return kv_table(facts)


def scale_table(scale: list[dict], t0: int | None) -> str:
    if not scale:
        return para("No scale decision changed the replica count.")
    rows = [[s.n(None if t0 is None else _secs(e["decided_at"], t0)), cell(e["direction"]),
             cell(f"{e['from_replicas']} \u2192 {e['to_replicas']}"), s.n(e["node_ready_s"]),
             s.n(e["replica_ready_s"]), s.n(e["first_token_s"]),
             *(s.n(e[p]) for p in PHASES), s.share(e["attainment_before"]),
             s.share(e["attainment_during"]), s.share(e["attainment_after"])] for e in scale]
    return table(("decided (s after start)", "direction", "replicas", "node ready (s)",
                  "replica ready (s)", "first token (s)", "image pull", "weights load",
                  "compile", "graph capture", "attainment 60 s before", "during cold start",
                  "60 s after"), rows) + para(
        "Seconds from the decision (scale_events.parquet). Attainment is the SLO share of the "
        "requests sent in each window; during is null for a scale-down.")


def interruptions_table(rows: list[dict], t0: int | None) -> str:
    out = []
    for r in rows:
        out.append([cell(r["node"]), s.n(None if t0 is None else _secs(r["notice_at"], t0)),
                    s.n(None if r["interrupted_at"] is None or t0 is None
                        else _secs(r["interrupted_at"], t0)),
                    s.n(r["in_flight_at_notice"]), s.n(r["lost"]), s.n(r["retried_ok"]),
                    s.n(r["drain_s"]), s.n(r["replacement_ready_s"])])
    return table(("node", "notice (s after start)", "interrupted (s after start)",
                  "in flight at notice", "lost", "resent ok", "drain (s)",
                  "replacement ready (s after the interruption)"), out) + para(
        "interruptions.parquet: a lost request is one on the node cut after the notice; resent "
        "ok follows retry_of chains. A negative replacement time: the replacement was ready "
        "before the node went.")


def run_section(run: RunData) -> str | None:
    summary = read_summary(run.run_dir)
    spot = read_rows(run.run_dir, "interruptions")
    if summary is None and spot is None:
        return None
    buckets = read_rows(run.run_dir, "episode")
    t0 = steady_start_ns(run.manifest, buckets)
    out = []
    if summary is not None:
        out += [summary_table(summary, run),
                para("The figure of this episode is under Plots (episode)."),
                scale_table(read_rows(run.run_dir, "scale_events") or [], t0)]
    if spot is not None:
        out.append(interruptions_table(spot, t0))
    return "\n".join(out)


SECTIONS = (
    Section("run", 35, "Episode: load, replicas, scale-ups and cost over the whole steady "
                       "phase", "episode", lambda p: run_section(p.run)),
)
DRAWS = (Plots("run", 40, write_plots, {"episode": ("episode at a glance", CAPTION)}),)

PLUGIN = (*SECTIONS, *DRAWS)  # what this file adds to the report package
