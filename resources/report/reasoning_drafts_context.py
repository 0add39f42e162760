"""Report sections of the workloads that change what latency and cost mean: reasoning models
(time to first ANSWER token beside TTFT, cost per 1M answer tokens), speculative decoding
(draft acceptance rate beside the ITL it buys) and long agentic sessions (TTFT by context
length, split by prefix-cache hit). Each section appears only when its run has the data.

The figures come from the analyzer's outputs (derived_metrics.parquet: ttfat_s_*,
reasoning_tokens, spec_acceptance_rate; ttft_by_context.parquet); an older run folder
without them shows none of these sections.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from matplotlib.figure import Figure
from servingbench.resources.report.html import cell, is_null, para, table
from servingbench.resources.report.plots import figure, plain_log, save, step_colors, styled, title
from servingbench.resources.report.registry import Plots, Section
from servingbench.resources.report.rundata import ReportError, RunData, headline_row
from servingbench.resources.report.sections import money, n, share

CONTEXT_FILE = "ttft_by_context.parquet"


def _col(frame: pd.DataFrame | None, name: str) -> pd.Series | None:
    if frame is None or name not in frame:
        return None
    return frame[name]


def has_reasoning(run: RunData) -> bool:
    """Time to first answer differs from TTFT somewhere, or reasoning tokens are known."""
    m = run.metrics
    reasoning, ttfat = _col(m, "reasoning_tokens"), _col(m, "ttfat_s_p50")
    if reasoning is not None and reasoning.notna().any() and (reasoning.fillna(0) > 0).any():
        return True
    if ttfat is None or ttfat.isna().all():
        return False
    return bool(((ttfat - m["ttft_s_p50"]).abs() > 0).any())


def answer_tokens(row) -> float | None:
    out, reasoning = row.get("output_tokens"), row.get("reasoning_tokens")
    if is_null(out) or is_null(reasoning):
        return None
    return float(out) - float(reasoning)


def cost_per_1m_answer(row, window_cost) -> float | None:
    """The window's cost over the tokens the user reads: output less reasoning."""
    answer = answer_tokens(row)
    if answer is None or not answer or is_null(window_cost):
        return None
    return float(window_cost) / answer * 1e6


def reasoning(run: RunData) -> str:
    costs = {}
    if run.cost is not None:
        costs = {c["step"]: c for c in run.cost.to_dict("records")}
    rows = []
    for m in run.metrics.sort_values(["load_mode", "target"], kind="stable").to_dict("records"):
        c = costs.get(m["step"], {})
        out, think = m.get("output_tokens"), m.get("reasoning_tokens")
        rows.append([cell(m["step"]), n(m["ttft_s_p50"]), n(m.get("ttfat_s_p50")),
                     n(m["ttft_s_p99"]), n(m.get("ttfat_s_p99")), n(out), n(think),
                     share(None if is_null(out) or is_null(think) or not out
                           else float(think) / float(out)),
                     money(c.get("cost_per_1m_output_usd")),
                     money(cost_per_1m_answer(m, c.get("window_cost_usd")))])
    return table(("step", "TTFT p50", "first answer p50", "TTFT p99", "first answer p99",
                  "output tokens", "reasoning tokens", "reasoning share",
                  "USD / 1M output tok", "USD / 1M answer tok"), rows) + para(
        "TTFT is the first token of any kind, a reasoning one included; the user waits for "
        "the first ANSWER token. Reasoning tokens are billed output the user never reads, "
        "so the cost per 1M answer tokens (the window's cost over output less reasoning "
        "tokens) is what a reply costs. Latencies in seconds.")


def has_speculative(run: RunData) -> bool:
    rate = _col(run.metrics, "spec_acceptance_rate")
    return rate is not None and rate.notna().any()


def speculative(run: RunData) -> str:
    rows = [[cell(m["step"]), share(m.get("spec_acceptance_rate")),
             share(m.get("itl_multi_token_share")), n(m["itl_s_p50"]), n(m["tpot_s_p50"]),
             n(m["output_tok_s"])]
            for m in run.metrics.sort_values(["load_mode", "target"], kind="stable")
            .to_dict("records")]
    return table(("step", "draft acceptance", "multi-token chunks", "ITL p50", "TPOT p50",
                  "output tok/s"), rows) + para(
        "Draft acceptance: accepted ÷ drafted tokens from the engine's counters over the "
        "step's window (telemetry). With speculative decoding a chunk carries several "
        "tokens; ITL is per token (a chunk's gap shared by its tokens).")


def read_context(run: RunData) -> pd.DataFrame | None:
    path = Path(run.run_dir) / CONTEXT_FILE
    if not path.exists():
        return None
    try:
        with pa.OSFile(str(path), "rb") as f:
            return pq.read_table(f).to_pandas()
    except (pa.ArrowException, OSError) as exc:
        raise ReportError(f"{path}: unreadable ({exc})") from None


def has_context(run: RunData, frame: pd.DataFrame | None) -> bool:
    kind = (run.manifest.get("scenario") or {}).get("kind")
    return frame is not None and not frame.empty and kind in ("agentic", "multi_turn")


def context(frame: pd.DataFrame) -> str:
    rows = []
    for r in frame.sort_values(["step", "context_lo", "cache"]).to_dict("records"):
        rows.append([cell(r["step"]), cell(f"{r['context_lo']:,}-{r['context_hi']:,}"),
                     cell(r["cache"]), n(r["n_ok"]), n(r["ttft_s_p50"]), n(r["ttft_s_p99"]),
                     share(r["cached_share"])])
    return table(("step", "context tokens", "cache", "ok", "TTFT p50", "TTFT p99",
                  "prompt served from cache"), rows) + para(
        "Each turn of a session resends its history; while the prefix cache holds it, "
        "only the newest tokens are prefilled. Where the sessions no longer fit the KV "
        "cache, hits turn into misses and TTFT jumps with the whole context to prefill. "
        "Cache classes are never pooled (contract §3.1); `all` is every class together.")


@styled
def plot_context(run: RunData, frame: pd.DataFrame) -> Figure | None:
    data = frame[frame["cache"] == "all"].dropna(subset=["ttft_s_p50"])
    if data.empty:
        return None
    fig, (ax, share_ax) = figure(11, run.emulated, ncols=2)
    steps = sorted(data["step"].unique())
    for step, color in zip(steps, step_colors(len(steps)), strict=True):
        d = data[data["step"] == step].sort_values("context_lo")
        mid = (d["context_lo"] + d["context_hi"]) / 2
        ax.plot(mid, d["ttft_s_p50"], marker="o", color=color, label=f"{step} p50")
        ax.plot(mid, d["ttft_s_p99"], marker=".", ls="--", color=color, label=f"{step} p99")
        share_ax.plot(mid, d["cached_share"], marker="o", color=color, label=step)
    for a in (ax, share_ax):
        plain_log(a, "x")
        a.set_xlabel("context (prompt tokens, bucket middle)")
    ax.set_ylabel("TTFT (s)")
    share_ax.set_ylabel("prompt served from the prefix cache")
    share_ax.set_ylim(-0.02, 1.02)
    title(ax, "TTFT by context length", run.emulated)
    title(share_ax, "prefix-cache share by context length", run.emulated)
    ax.legend(loc="upper left")
    return fig


def _headline_metrics(run: RunData, step) -> dict:
    if run.metrics is None:
        return {}
    rows = run.metrics[run.metrics["step"] == step] if step is not None else run.metrics.iloc[:0]
    if rows.empty:  # no headline step: the run's highest-throughput valid step
        valid = run.metrics[run.metrics["valid"].fillna(False).astype(bool)]
        rows = valid.sort_values("output_tok_s", ascending=False).head(1)
    return {} if rows.empty else rows.iloc[0].to_dict()


def comparison_applies(latest: list[RunData]) -> bool:
    return any(r.metrics is not None and (has_reasoning(r) or has_speculative(r))
               for r in latest)


def comparison_table(latest: list[RunData], headline_step) -> str:
    """Per candidate at its headline step (else its busiest valid step): TTFT beside the
    time to first answer token, the reasoning share, the cost per 1M answer tokens, and the
    draft acceptance rate of speculative decoding."""
    rows = []
    for run in latest:
        m = _headline_metrics(run, headline_step(run))
        cost = None
        if run.cost is not None and m:
            match = run.cost[run.cost["step"] == m["step"]]
            cost = None if match.empty else match.iloc[0].to_dict()
        out, think = m.get("output_tokens"), m.get("reasoning_tokens")
        rows.append([cell(run.candidate), cell(m.get("step")), n(m.get("ttft_s_p99")),
                     n(m.get("ttfat_s_p99")),
                     share(None if is_null(out) or is_null(think) or not out
                           else float(think) / float(out)),
                     money(None if cost is None else cost.get("cost_per_1m_output_usd")),
                     money(None if cost is None else cost_per_1m_answer(
                         m, cost.get("window_cost_usd"))),
                     share(m.get("spec_acceptance_rate")), share(m.get("itl_multi_token_share"))])
    return table(("candidate", "step", "p99 TTFT (s)", "p99 first answer (s)",
                  "reasoning share", "USD / 1M output tok", "USD / 1M answer tok",
                  "draft acceptance", "multi-token chunks"), rows) + para(
        "First answer: time to the first answer (not reasoning) token, what a user of a "
        "reasoning model waits for. Draft acceptance: accepted ÷ drafted tokens of "
        "speculative decoding over the step (null: no counters, or no speculation).")


def _context_body(page) -> str | None:
    frame = read_context(page.run)
    return context(frame) if has_context(page.run, frame) else None


SECTIONS = (
    Section("run", 40, "Reasoning: time to first answer token, cost per answer token",
            "reasoning", lambda p: reasoning(p.run)
            if p.run.metrics is not None and has_reasoning(p.run) else None),
    Section("run", 41, "Speculative decoding: draft acceptance", "speculative",
            lambda p: speculative(p.run)
            if p.run.metrics is not None and has_speculative(p.run) else None),
    Section("run", 42, "TTFT by context length (ttft_by_context.parquet)", "context",
            _context_body),
    Section("comparison", 50, "Reasoning and speculative decoding", "reasoning",
            lambda p: comparison_table(p.latest, lambda r: (headline_row(r, p.slo) or {}).get("step"))
            if comparison_applies(p.latest) else None),
)


def _draw(run: RunData, out_dir: Path, slo_ttft_s: float, slo_tpot_s: float) -> dict[str, Path]:
    frame = read_context(run)
    if has_context(run, frame) and (fig := plot_context(run, frame)) is not None:
        return {"ttft_by_context": save(fig, Path(out_dir) / "ttft_by_context.png")}
    return {}


DRAWS = (
    Plots("run", 20, _draw, {"ttft_by_context": (
        "TTFT and prefix-cache share by context length", "Left: TTFT p50 (solid) and p99 "
        "(dashed) per context-length bucket and step; right: the share of the prompt the server "
        "served from its prefix cache. A jump on the left where the share falls is the KV "
        "cache evicting.")}),
)


PLUGIN = (*SECTIONS, *DRAWS)  # what this file adds to the report package
