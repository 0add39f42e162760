"""Server reconciliation in the run report: the table of client vs server counts per step
(flagged steps highlighted) and the server-side TTFT histogram beside the client's.

The numbers come from resources.analysis.reconcile (`reconciliation.json`) and the run's
`server_metrics.json`; this module only shows them.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
from servingbench.resources.analysis import reconcile as rc
from servingbench.resources.report.html import Cell, badge, cell, para, pct, table
from servingbench.resources.report.plots import figure, plain_log, save, step_colors, styled, title
from servingbench.resources.report.registry import Plots, Section
from servingbench.resources.report.rundata import ReportError, RunData
from servingbench.resources.report.sections import n


def reconcile_run(run: RunData) -> tuple[dict | None, dict | None]:
    """(reconciliation, server_metrics), writing `reconciliation.json` into the run folder;
    (None, None) when the run has no server_metrics.json."""
    try:
        server = rc.load_server_metrics(run.run_dir)
        if server is None:
            return None, None
        rc.write_reconciliation(run.run_dir)
        return rc.reconcile(run.run_dir), server
    except rc.ReconcileError as exc:
        raise ReportError(str(exc)) from None


def section(rec: dict | None) -> str:
    if rec is None:
        return para("No server_metrics.json in the folder: the engine's own counters were "
                    "not scraped for this run (imported, or recorded before reconciliation).")
    if not rec["available"]:
        return para(f"Server metrics unavailable: {rec['reason']}. The run is not affected; "
                    "only the second witness is missing.")
    rows, classes = [], []
    for r in rec["steps"]:
        state = (badge("FLAGGED", "bad") if r["flagged"] else
                 badge("agrees", "ok") if r["gap"] is not None else badge("not compared", "unknown"))
        rows.append([cell(r["step"]), n(r["client_tokens"]), n(r["server_tokens"]),
                     cell(pct(r["gap"], 2)), n(r["client_requests"]), n(r["server_requests"]),
                     cell(pct(r["request_gap"], 2)), state, cell(r["reason"])])
        classes.append("bad" if r["flagged"] else "")
    note = (f"Client: the steady request log (output tokens of ok requests, every request "
            f"sent). Server: the engine's own /metrics counters (tokens generated, requests "
            f"finished) scraped before and after each step. Gap = "
            f"(server - client) / client; a step is flagged when a gap exceeds "
            f"{rec['tolerance']:.0%}.")
    if rec.get("emulated"):
        note += " The server here is the EMULATOR: its counters are emulated too."
    return table(("step", "client tokens", "server tokens", "token gap", "client requests",
                  "server requests", "request gap", "result", "why"), rows, classes) + para(
        note) + server_view(rec)


VIEW = ("server_ttft_mean_s", "server_itl_mean_s", "server_queue_mean_s",
        "server_prefill_mean_s", "server_decode_mean_s", "server_prefix_cache_hits",
        "server_preemptions")


def _ms(value) -> Cell:
    return n(None if value is None else value * 1e3, digits=2)


def server_view(rec: dict) -> str:
    """The engine's own view of each step (its histograms and counters, where it serves
    them) beside the client's: shown, never flagged."""
    steps = [r for r in rec["steps"] if any(r.get(k) is not None for k in VIEW)]
    if not steps:
        return ""
    rows = [[cell(r["step"]), _ms(r.get("client_ttft_mean_s")), _ms(r.get("server_ttft_mean_s")),
             _ms(r.get("client_itl_mean_s")), _ms(r.get("server_itl_mean_s")),
             _ms(r.get("server_queue_mean_s")), _ms(r.get("server_prefill_mean_s")),
             _ms(r.get("server_decode_mean_s")), n(r.get("client_cached_tokens")),
             n(r.get("server_prefix_cache_hits")), n(r.get("server_preemptions"))]
            for r in steps]
    return table(("step", "TTFT ms client", "TTFT ms server", "ITL ms client", "ITL ms server",
                  "queue ms server", "prefill ms server", "decode ms server",
                  "cached tokens client", "prefix-cache hits server", "preemptions server"),
                 rows) + para(
        "The engine's own histograms and counters for the same steps (means of each step's "
        "deltas): TTFT and inter-token latency beside the client's (the client's TTFT adds the "
        "HTTP exchange; its ITL is first to last token over output tokens - 1), the time "
        "requests queued, prefilled and decoded inside the engine, the prompt tokens served "
        "from its prefix cache beside the cached tokens the client was told, and how often "
        "the scheduler preempted a request for want of KV cache. Shown, never flagged.")


def _client_ttft(run: RunData) -> dict[str, np.ndarray]:
    log = run.requests
    if log is None or log.num_rows == 0:
        return {}
    ok = log.filter(pc.and_(pc.equal(log["status"], "ok"), pc.is_valid(log["first_token_at"])))
    ttft = pc.subtract(ok["first_token_at"].cast("int64"), ok["sent_at"].cast("int64"))
    out: dict[str, list[float]] = {}
    for step, v in zip(ok["step"].to_pylist(), ttft.to_pylist(), strict=True):
        out.setdefault(step, []).append(v / 1e9)
    return {k: np.asarray(v) for k, v in out.items()}


def _le(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return math.inf


@styled
def plot_server_ttft(run: RunData, server: dict | None, slo_ttft_s: float | None):
    """Share of requests with TTFT <= each bucket bound of the server's histogram: the
    client's (its log, binned at those bounds) left, the server's (/metrics) right."""
    steps = [s for s in (server or {}).get("steps", [])
             if s.get("available") and s.get("ttft_buckets") and s.get("ttft_count")]
    if not steps:
        return None
    client = _client_ttft(run)
    fig, (left, right) = figure(11, run.emulated, ncols=2)
    colors = step_colors(len(steps))
    lo, hi = math.inf, 0.0
    for color, s in zip(colors, steps, strict=True):
        bounds = [(_le(le), c) for le, c in s["ttft_buckets"] if math.isfinite(_le(le))]
        xs = np.asarray([b for b, _ in bounds])
        series = {right: np.asarray([c / s["ttft_count"] for _, c in bounds])}
        samples = np.concatenate([client.get(name, np.empty(0)) for name in s["steps"]])
        if len(samples):
            series[left] = np.asarray([(samples <= b).mean() for b in xs])
        for ax, ys in series.items():
            ax.plot(xs, ys, marker="o", ms=3, color=color, lw=1.6, label=s["step"])
            full = np.nonzero(ys >= 1.0)[0]
            hi = max(hi, xs[full[0]] if len(full) else xs[-1])
            lo = min(lo, xs[max(0, int(np.argmax(ys > 0)) - 1)])
    for ax, side in ((left, "client-side (request log)"), (right, "server-side (engine /metrics)")):
        plain_log(ax)
        ax.set_xlim(lo / 1.5, max(hi * 4, (slo_ttft_s or 0) * 1.5))
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("TTFT bucket bound (s)")
        if slo_ttft_s is not None:
            ax.axvline(slo_ttft_s, color="#444444", ls=":", lw=1.2, label=f"TTFT SLO {slo_ttft_s:g} s")
        ax.legend(loc="lower right")
        title(ax, side, run.emulated)
    left.set_ylabel("share of requests with TTFT <= bound")
    fig.suptitle(f"TTFT histogram, client-side vs server-side - {run.run_id}",
                 color="#b00020" if run.emulated else "#1a1a1a")
    return fig


def write_server_ttft_plot(run: RunData, server: dict | None, out_dir: Path,
                           slo_ttft_s: float | None) -> Path | None:
    fig = plot_server_ttft(run, server, slo_ttft_s)
    return None if fig is None else save(fig, Path(out_dir) / "server_ttft.png")


SECTIONS = (
    Section("run", 120, "Server reconciliation (client vs the engine's /metrics)",
            "reconciliation", lambda p: section(p.reconciliation)),
)


def _draw(run: RunData, out_dir: Path, slo_ttft_s: float, slo_tpot_s: float) -> dict[str, Path]:
    # reconcile_run has read server_metrics.json already (and raised if it was unreadable)
    path = write_server_ttft_plot(run, rc.load_server_metrics(run.run_dir), out_dir, slo_ttft_s)
    return {} if path is None else {"server_ttft": path}


DRAWS = (
    Plots("run", 10, _draw, {"server_ttft": (
        "TTFT histogram, client-side vs server-side", "Share of requests whose TTFT is at most "
        "each bucket bound of the engine's histogram: left the client's own measurement (sent "
        "to first token), right the server-side histogram from its /metrics (arrival to first "
        "token inside the engine).")}),
)


PLUGIN = (*SECTIONS, *DRAWS)  # what this file adds to the report package
