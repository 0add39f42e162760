"""The report of one run: `<run_dir>/report.html`, with its plots in `<run_dir>/plots/`."""

from __future__ import annotations

from pathlib import Path

from servingbench.resources.analysis.metrics import DEFAULT_SLO
from servingbench.resources.analysis.summary import measured_host
from servingbench.resources.report import reconciliation as recon
from servingbench.resources.report import registry
from servingbench.resources.report import sections as s
from servingbench.resources.report.html import emulated_banner, image, page, para, write_html
from servingbench.resources.report.plots import write_run_plots
from servingbench.resources.report.registry import RunPage, Section
from servingbench.resources.report.rundata import RunData, load_run

# the plots plots.py draws; a section's file declares its own (DRAWS, registry.Plots)
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


def _plots(page: RunPage) -> str:
    captions = dict(PLOT_CAPTIONS)
    for drawn in registry.plots("run"):
        captions |= drawn.captions
    figs = [image(path, captions[name][0], captions[name][1])
            for name, path in page.plots.items()]
    if "ttft_cdf" not in page.plots:
        figs.append(para("No raw request/chunk log in the folder: CDFs not drawn."))
    return "\n".join(figs)


# The run report's own sections, drawn by sections.py's helpers; the others are declared by
# their files (reasoning_drafts_context.py, frontier_section.py, telemetry.py, reconciliation.py) and
# registry.py puts them all in order.
SECTIONS = (
    Section("run", 10, "Headline: the SLO operating point", "headline", lambda p: s.headline(p.run)),
    Section("run", 20, "Gates (contract §5)", "gates", lambda p: s.gates(p.run)),
    Section("run", 30, "Steps (steady phase)", "steps", lambda p: s.steps(p.run)),
    Section("run", 50, "Invalid steps and why", "invalid", lambda p: s.invalid_steps(p.run)),
    Section("run", 60, "Cost per 1M output tokens, per step", "cost", lambda p: s.cost(p.run)),
    Section("run", 80, "Batch job (job.json)", "job",
            lambda p: s.job(p.run) if p.run.job else None),
    Section("run", 90, "SLO capacity search (slo_capacity.json)", "slo-search",
            lambda p: s.slo_search(p.run) if p.run.slo_capacity else None),
    Section("run", 110, "Plots", "plots", _plots),
    Section("run", 130, "Manifest", "manifest", lambda p: s.manifest(p.run)),
    Section("run", 140, "Cold start (provision, deploy and its sub-phases, warm-up)",
            "cold-start", lambda p: s.cold_start(p.run)),
    Section("run", 150, "Load generator self-watch", "self-watch", lambda p: s.self_watch(p.run)),
)


def render_run(run: RunData, plots: dict[str, Path], reconciliation: dict | None = None) -> str:
    body = [
        f"<h1>Run report \u2014 {s.esc(run.run_id)}</h1>",
        f'<p class="sub">{s.title_line(run)}</p>',
        f'<p class="sub">source: {s.source_cell(run).html} \u00b7 status: {s.status(run).html}</p>',
        *([f'<p class="sub" id="measured-host">measured on {s.esc(host)}</p>']
          if (host := measured_host(run.manifest)) else []),
        *registry.render("run", RunPage(run, plots, reconciliation)),
    ]
    banner = emulated_banner(EMULATED_TEXT + " Error band: " + (
        (run.fidelity or {}).get("text") or "uncalibrated (no band recorded)")
        + ", cross-validated (docs/emulator.md, Fidelity).") if run.emulated else ""
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
    reconciliation, _ = recon.reconcile_run(run)  # writes reconciliation.json, an output
    for drawn in registry.plots("run"):
        plots |= drawn.draw(run, run.run_dir / "plots", slo_ttft, slo_tpot)
    out = Path(out_path) if out_path else run.run_dir / "report.html"
    return write_html(render_run(run, plots, reconciliation), out)


PLUGIN = SECTIONS  # what this file adds to the report package
