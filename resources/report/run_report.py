"""The report of one run: `<run_dir>/report.html`, with its plots in `<run_dir>/plots/`."""

from __future__ import annotations

from pathlib import Path

from resources.analysis.summary import measured_host
from resources.report import frontier_section, telemetry
from resources.report import reconciliation as recon
from resources.report import sections as s
from resources.report import workloads as wl
from resources.report.html import emulated_banner, image, page, para, section, write_html
from resources.report.plots import save, write_run_plots
from resources.report.rundata import RunData, load_run

DEFAULT_SLO = (2.0, 0.1)  # contract §3 defaults (TTFT s, TPOT s)

PLOT_CAPTIONS = {
    "ttft_cdf": ("TTFT CDF per step", "Client-side TTFT (sent_at to first token) of every ok "
                 "steady request; dashed lines are invalid steps."),
    "itl_cdf": ("per-token ITL CDF per step", "Per-token inter-token latency from the chunk "
                "log, each chunk's gap divided by its tokens and counted once per token."),
    "scaling": ("throughput and p99 TTFT vs concurrency", "One point per step; hollow red "
                "markers are invalid steps (never ranked)."),
    "telemetry": ("telemetry over time", "Accelerator utilization, memory, power and the "
                  "engine's KV cache and queue from telemetry.parquet; grey is warm-up, each "
                  "shaded band a steady step's window; red ticks are failed samples."),
    "server_ttft": ("TTFT histogram, client-side vs server-side", "Share of requests whose "
                    "TTFT is at most each bucket bound of the engine's histogram: left the "
                    "client's own measurement (sent to first token), right the server-side "
                    "histogram from its /metrics (arrival to first token inside the engine)."),
    "ttft_by_context": ("TTFT and prefix-cache share by context length", "Left: TTFT p50 "
                        "(solid) and p99 (dashed) per context-length bucket and step; right: "
                        "the share of the prompt the server served from its prefix cache. A "
                        "jump on the left where the share falls is the KV cache evicting."),
}
EMULATED_TEXT = ("EMULATED \u2014 every number on this page comes from the local engine "
                 "emulator, not from a real engine on real hardware. Not a measurement.")


def slo_of(runs: list[RunData]) -> tuple[float, float]:
    """The SLO of the first headline found, else the contract's defaults."""
    for run in runs:
        if run.headline is not None and not run.headline.empty:
            row = run.headline.iloc[0]
            return float(row["slo_ttft_s"]), float(row["slo_tpot_s"])
    return DEFAULT_SLO


def _workload_sections(run: RunData) -> list[str]:
    """Reasoning, speculative decoding and context-length sections, where the run has them."""
    out = []
    if run.metrics is not None and wl.has_reasoning(run):
        out.append(section("Reasoning: time to first answer token, cost per answer token",
                           wl.reasoning(run), "reasoning"))
    if run.metrics is not None and wl.has_speculative(run):
        out.append(section("Speculative decoding: draft acceptance", wl.speculative(run),
                           "speculative"))
    ctx = wl.read_context(run)
    if wl.has_context(run, ctx):
        out.append(section("TTFT by context length (ttft_by_context.parquet)", wl.context(ctx),
                           "context"))
    return out


def render_run(run: RunData, plots: dict[str, Path], reconciliation: dict | None = None) -> str:
    body = [
        f"<h1>Run report \u2014 {s.esc(run.run_id)}</h1>",
        f'<p class="sub">{s.title_line(run)}</p>',
        f'<p class="sub">source: {s.source_cell(run).html} \u00b7 status: {s.status(run).html}</p>',
        *([f'<p class="sub" id="measured-host">measured on {s.esc(host)}</p>']
          if (host := measured_host(run.manifest)) else []),
        section("Headline: the SLO operating point", s.headline(run), "headline"),
        section("Gates (contract §5)", s.gates(run), "gates"),
        section("Steps (steady phase)", s.steps(run), "steps"),
        *_workload_sections(run),
        section("Invalid steps and why", s.invalid_steps(run), "invalid"),
        section("Cost per 1M output tokens, per step", s.cost(run), "cost"),
        section("Frontier and what-if prices (not billed)", frontier_section.run_section(run),
                "frontier"),
        *([section("Batch job (job.json)", s.job(run), "job")] if run.job else []),
        *([section("SLO capacity search (slo_capacity.json)", s.slo_search(run), "slo-search")]
          if run.slo_capacity else []),
        section("Accelerator telemetry per step", telemetry.run_section(run), "telemetry"),
    ]
    figs = [image(path, PLOT_CAPTIONS[name][0], PLOT_CAPTIONS[name][1])
            for name, path in plots.items()]
    if "ttft_cdf" not in plots:
        figs.append(para("No raw request/chunk log in the folder: CDFs not drawn."))
    body += [
        section("Plots", "\n".join(figs), "plots"),
        section("Server reconciliation (client vs the engine's /metrics)",
                recon.section(reconciliation), "reconciliation"),
        section("Manifest", s.manifest(run), "manifest"),
        section("Cold start (provision, deploy and its sub-phases, warm-up)",
                s.cold_start(run), "cold-start"),
        section("Load generator self-watch", s.self_watch(run), "self-watch"),
    ]
    banner = emulated_banner(EMULATED_TEXT) if run.emulated else ""
    title = f"{'EMULATED ' if run.emulated else ''}servingbench run {run.run_id}"
    return page(title, "\n".join(body), banner)


def write_run_report(run_dir: Path | str, out_path: Path | str | None = None,
                     slo: tuple[float, float] | None = None) -> Path:
    """Write the self-contained HTML report of one run folder (contract §6), its PNG plots
    (`<run_dir>/plots/`) and, when the run has server_metrics.json, its
    `reconciliation.json`; returns the HTML path (default `<run_dir>/report.html`).
    `slo` (TTFT s, TPOT s) sets the plots' SLO lines; default the run's headline SLO.
    Raises ReportError for an unreadable folder."""
    run = load_run(run_dir)
    slo_ttft, slo_tpot = slo or slo_of([run])
    plots = write_run_plots(run, run.run_dir / "plots", slo_ttft, slo_tpot)
    reconciliation, server = recon.reconcile_run(run)
    server_plot = recon.write_server_ttft_plot(run, server, run.run_dir / "plots", slo_ttft)
    if server_plot is not None:
        plots["server_ttft"] = server_plot
    ctx = wl.read_context(run)
    if wl.has_context(run, ctx) and (fig := wl.plot_context(run, ctx)) is not None:
        plots["ttft_by_context"] = save(fig, run.run_dir / "plots" / "ttft_by_context.png")
    out = Path(out_path) if out_path else run.run_dir / "report.html"
    return write_html(render_run(run, plots, reconciliation), out)
