"""The comparison report across candidates: the latest run of each candidate side by side,
and, where a candidate was run several times, the spread of its steps (repeatability)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

import pandas as pd
from servingbench.resources.analysis.frontier import DEFAULT_LEVELS, levels_of_folders
from servingbench.resources.analysis.ranking import Standing, rank, within_bands
from servingbench.resources.analysis.spot import FILE as SPOT_PAIRS_FILE
from servingbench.resources.analysis.spot import pairs_of_folders
from servingbench.resources.analysis.summary import within_bands_lines
from servingbench.resources.contract.outputs import check_output
from servingbench.resources.contract.schemas import write_parquet
from servingbench.resources.report import registry
from servingbench.resources.report import sections as s
from servingbench.resources.report.html import (
    Cell,
    badge,
    cell,
    emulated_banner,
    esc,
    image,
    num,
    page,
    para,
    table,
    write_html,
)
from servingbench.resources.report.plots import write_comparison_plots
from servingbench.resources.report.registry import ComparisonPage, Section
from servingbench.resources.report.regression import Thresholds, compare_to_history, record_of
from servingbench.resources.report.repeatability import step_spreads
from servingbench.resources.report.run_report import slo_of
from servingbench.resources.report.rundata import (
    ReportError,
    RunData,
    headline_row,
    latest_per_candidate,
    load_run,
)

EMULATED_TEXT = ("EMULATED data on this page \u2014 rows and series marked EMULATED come "
                 "from the local engine emulator, not from real hardware. They are never "
                 "ranked against measured candidates.")


def _spread_text(spreads: pd.DataFrame, run: RunData, step, metric: str, money: bool) -> Cell:
    if step is None or pd.isna(step) or spreads.empty:
        return cell(None)
    rows = spreads[(spreads["candidate"] == run.candidate) & (spreads["step"] == step)
                   & (spreads["metric"] == metric)
                   & (spreads["source"] == ("emulated" if run.emulated else "measured"))]
    if rows.empty or int(rows.iloc[0]["n"]) < 2:
        return cell("single run")
    r = rows.iloc[0]
    f = s.usd if money else s.num
    text = f"median {f(r['median'])} [{f(r['min'])} \u2013 {f(r['max'])}], n={int(r['n'])}"
    if not pd.isna(r["ci95_low"]):
        text += f"; 95 % CI {f(r['ci95_low'])} \u2013 {f(r['ci95_high'])}"
    return cell(text)


def _quality_cells(run: RunData) -> list[Cell]:
    """Accuracy (with its Wilson 95 % interval) and the parity verdict, beside the cost."""
    q = run.quality
    if q is None or q.get("accuracy") is None:
        acc = cell("n/a (emulated)" if run.emulated else None)
    else:
        acc = cell(f"{q['accuracy']:.3f} [{q['ci95_low']:.3f} \u2013 {q['ci95_high']:.3f}], "
                   f"n={q['n']}")
    p = run.parity
    if p is None:
        verdict = cell(None)
    elif p.get("passed") is True:
        verdict = badge("matches reference", "ok")
    elif p.get("passed") is False and p.get("weights") == "random":
        verdict = badge(f"FAILED parity ({p.get('status')}): random weights, by design", "bad")
    elif p.get("passed") is False:
        verdict = badge(f"FAILED parity ({p.get('status')})", "bad")
    else:
        verdict = badge("not applicable", "unknown")
    return [acc, verdict]


def short_id(run_id: str) -> str:
    """`20261129T020000Z-p5.48xlarge-p5-scout-bf16-tp8-7f3a` -> `20261129T020000Z…7f3a`: the
    time it was made and its random tail, enough to tell runs apart on one line."""
    if len(run_id) <= 24:
        return run_id
    return f"{run_id[:16]}\u2026{run_id[-4:]}"


def run_link(run: RunData, page_dir: Path | None) -> Cell:
    """The run's short id, linking to its own report (report.html in its folder) relative to
    the comparison page; the full id is the link's title."""
    code = f'<code class="run-id">{esc(short_id(run.run_id))}</code>'
    if page_dir is None:
        return Cell(code)
    href = os.path.relpath(Path(run.run_dir).resolve() / "report.html", page_dir.resolve())
    # a folder name is not a URL: `./` so that `javascript:x` is never read as a scheme, and
    # percent-encoded so that `#`, `?` or `%` in it are path characters
    href = "./" + quote(Path(href).as_posix(), safe="/")
    return Cell(f'<a href="{esc(href)}" title="{esc(run.run_id)}">{code}</a>')


def headline_table(latest: list[RunData], runs: list[RunData], spreads: pd.DataFrame,
                   slo: tuple[float, float], page_dir: Path | None = None) -> str:
    counts = pd.Series([r.candidate for r in runs]).value_counts().to_dict()
    # a candidate whose quality trails its reference is shown, never ranked on cost
    standings = rank(Standing(run.candidate, headline_row(run, slo), run.emulated,
                              run.failed_parity, ref=run, band=run.band) for run in latest)
    rows, classes = [], []
    for standing, place in standings:
        run, h = standing.ref, standing.headline
        if h is None:
            tail = [cell(s.no_headline_reason(run))] + [cell(None)] * 8
        else:
            step = (cell(h["step"]) if s.meets(h["meets_slo"]) is not None
                    else cell("; ".join(s.not_measured_lines(run)) or None))
            tail = [s.meets_badge(h["meets_slo"]), step, s.n(h["output_tok_s"]), s.n(h["ttft_s_p99"]),
                    s.n(h["tpot_s_p99"]), s.money(h["cost_per_1m_output_usd"]),
                    cell(h["bill_status"]),
                    _spread_text(spreads, run, h["step"], "output_tok_s", False),
                    _spread_text(spreads, run, h["step"], "cost_per_1m_output_usd", True)]
        rows.append([cell(place), cell(run.candidate), s.source_cell(run),
                     cell(run.manifest.get("instance_type")), run_link(run, page_dir),
                     cell(counts.get(run.candidate, 1)), s.status(run), *tail,
                     *_quality_cells(run)])
        bad = h is None or s.meets(h["meets_slo"]) is False or run.failed_parity
        classes.append(" ".join(c for c in ("emulated" if run.emulated else "",
                                            "bad" if bad else "") if c))
    head = ("rank", "candidate", "source", "instance type", "latest run", "runs", "status",
            "meets SLO", "step", "output tok/s", "p99 TTFT (s)", "p99 TPOT (s)",
            "USD / 1M output tok", "bill", "output tok/s across runs", "USD / 1M across runs",
            "accuracy [95 % CI]", "quality parity")
    note = (f"SLO: p99 TTFT \u2264 {slo[0]:g} s and p99 TPOT \u2264 {slo[1]:g} s. The step "
            "is the valid step with the highest output tokens/s within the SLO. Ranked by cost "
            "among measured candidates only; emulated rows are never ranked, and neither is a "
            "candidate whose accuracy failed parity with its group's reference. An emulated "
            "row's band is the emulator's cross-validated error of output tokens/s against "
            "published measurements of its accelerator and engine (docs/emulator.md, Fidelity).")
    ties = "".join(para(f"No winner: {line}.") for line in within_bands_lines(within_bands(standings)))
    return table(head, rows, classes) + para(note) + ties


def workloads_table(latest: list[RunData]) -> str:
    """Each candidate's SLO search (capacity, bracket, SLO cost) and batch job (makespan,
    throughput, cost per job), from slo_capacity.json and job.json."""
    out = []
    searches = [r for r in latest if r.slo_capacity]
    if searches:
        rows = []
        for run in searches:
            c, h = run.slo_capacity, headline_row(run) or {}
            rows.append([cell(run.candidate), s.source_cell(run), cell(c["load_mode"]),
                         cell(len(c["probes"])), s.n(c["capacity"]),
                         cell(f"[{num(c['interval'][0])}, {num(c['interval'][1])}]"),
                         s.money(h.get("slo_search_cost_per_1m_output_usd"))])
        out.append(table(("candidate", "source", "probed", "probes", "capacity",
                          "bracket [met, not met]", "SLO cost USD / 1M output tok"), rows))
    jobs = [r for r in latest if r.job]
    if jobs:
        rows = [[cell(r.candidate), s.source_cell(r), s.n(r.job["requests"]), s.n(r.job["ok"]),
                 s.n(r.job["makespan_s"]), s.n(r.job["output_tok_s"]),
                 s.small_money(r.job["cost_per_job_usd"])] for r in jobs]
        out.append(table(("candidate", "source", "requests", "ok", "makespan (s)",
                          "output tok/s (job)", "cost per job"), rows))
    return "\n".join(out) + para(
        "SLO cost: the cost per 1M output tokens at the highest load that met the search's "
        "own SLO. A batch job is judged by its makespan and cost per job.")


def repeatability_table(spreads: pd.DataFrame) -> str:
    rep = spreads[spreads["n"] >= 2] if not spreads.empty else spreads
    if rep.empty:
        return para("Each step was run once per candidate: no spread to show. Run a "
                    "candidate again to see min / median / max and a 95 % confidence interval.")
    rows = []
    for r in rep.itertuples(index=False):
        money = r.metric == "cost_per_1m_output_usd"
        f = s.money if money else s.n
        ci = (cell(None) if pd.isna(r.ci95_low) else
              cell(f"{f(r.ci95_low).html} \u2013 {f(r.ci95_high).html}"))
        rows.append([cell(r.candidate), cell(r.source), cell(r.step), cell(r.label),
                     s.n(r.n), f(r.min), f(r.median), f(r.max), f(r.mean), ci,
                     cell(", ".join(r.run_ids))])
    return table(("candidate", "source", "step", "figure", "n", "min", "median", "max", "mean",
                  "95 % CI of the mean", "runs"), rows) + para(
        "Valid steps only. 95 % CI: mean \u00b1 t(0.975, n\u22121) \u00d7 s / \u221an, "
        "shown where n \u2265 3.")


def regression_table(latest: list[RunData], runs: list[RunData],
                     slo: tuple[float, float]) -> str:
    """The nightly check, as the pipeline runs it, for each candidate's latest run."""
    records = {r.run_id: record_of(r, slo) for r in runs}
    rows, classes = [], []
    for run in latest:
        current = records[run.run_id]
        history = [records[r.run_id] for r in runs
                   if r.candidate == run.candidate and r.run_id != run.run_id
                   and records[r.run_id] is not None]
        if current is None or not history:
            why = "no headline" if current is None else "no earlier run"
            rows.append([cell(run.candidate), cell(run.run_id), s.n(len(history))]
                        + [cell(None)] * 3 + [badge(why, "unknown")])
            classes.append("")
            continue
        res = compare_to_history(current, history)
        found = {f["metric"]: f for f in res.findings}
        changes = [s.share(found[m]["change"]) for m in
                   ("output_tok_s", "ttft_s_p99", "cost_per_1m_output_usd")]
        status = badge("WARN: " + ", ".join(res.metadata["regressed_metrics"]), "bad") \
            if res.regressed else badge("ok", "ok")
        rows.append([cell(run.candidate), cell(run.run_id), s.n(res.metadata["n_history"]),
                     *changes, status])
        classes.append("bad" if res.regressed else "")
    t = Thresholds()
    return table(("candidate", "latest run", "earlier runs", "output tok/s vs median",
                  "p99 TTFT vs median", "USD / 1M vs median", "check"), rows, classes) + para(
        f"Against the median of up to 5 earlier runs of the same candidate, source and SLO; "
        f"WARN when output tok/s falls more than {t.throughput_drop:.0%}, p99 TTFT rises "
        f"more than {t.ttft_p99_rise:.0%} or cost per 1M rises more than {t.cost_rise:.0%}.")


def side_by_side(latest: list[RunData]) -> str:
    facts = [dict(s.manifest_facts(run)) for run in latest]
    names = list(facts[0]) if facts else []
    rows = [[cell(name)] + [f[name] if isinstance(f[name], Cell) else cell(f[name])
                            for f in facts] for name in names]
    return table(["fact"] + [r.candidate for r in latest], rows)


def cold_start_table(latest: list[RunData]) -> str:
    secs = [s.phase_seconds(run) for run in latest]
    names = [p for p in s.COLD_START if any(p in d for d in secs)]
    if not names:
        return para("No run records its phases.")
    rows = [[cell(f"\u2003{p}" if p in s.DEPLOY_SUB else p)] + [s.n(d.get(p)) for d in secs]
            for p in names]
    return table(["phase (seconds)"] + [r.candidate for r in latest], rows) + para(
        "Indented rows are deploy sub-phases. Cold start is never mixed into steady-state figures.")


def gates_table(latest: list[RunData]) -> str:
    rows, classes = [], []
    for run in latest:
        failed = [g for g in run.gates or [] if g["passed"] is False]
        text = "; ".join(f"{g['rule']} {g['name']}: {g['message']}" for g in failed) or None
        rows.append([cell(run.candidate), cell(run.run_id), s.status(run), cell(text)])
        classes.append("bad" if failed else "")
    return table(("candidate", "run", "status", "failed rules"), rows, classes)


def invalid_table(latest: list[RunData]) -> str:
    rows = []
    for run in latest:
        if run.metrics is None:
            continue
        steps = {st["step"]: st for st in run.manifest.get("steps") or []}
        for m in run.metrics.itertuples(index=False):
            if not m.valid:
                rows.append([cell(run.candidate), cell(run.run_id), cell(m.step),
                             cell(m.invalid_reason), cell(s.why_invalid(m, steps.get(m.step)))])
    if not rows:
        return para("Every step of every latest run is valid.")
    return table(("candidate", "run", "step", "invalid_reason", "why"), rows,
                 ["invalid"] * len(rows))


def runs_table(runs: list[RunData], latest: list[RunData]) -> str:
    latest_ids = {r.run_id for r in latest}
    ordered = sorted(runs, key=lambda r: (r.candidate, r.created_at_ns, r.run_id))
    rows = [[cell(r.candidate), cell(r.run_id), cell(r.manifest["created_at"]), s.source_cell(r),
             s.status(r), cell("latest" if r.run_id in latest_ids else "earlier"),
             cell(str(r.run_dir))] for r in ordered]
    return table(("candidate", "run", "created_at", "source", "status", "", "folder"), rows)


# The comparison's own sections; the others are declared by their files (frontier_section.py,
# reasoning_drafts_context.py, telemetry.py) and registry.py puts them all in order.
SECTIONS = (
    Section("comparison", 10, "Headline: cost at the SLO operating point", "headline",
            lambda p: headline_table(p.latest, p.runs, p.spreads, p.slo, p.page_dir)),
    Section("comparison", 30, "Plots", "plots", lambda p: image(
        p.plots["latency_throughput"], "latency vs throughput",
        "Every candidate's steps; dotted lines are the SLO.")
        + image(p.plots["cost_per_1m"], "cost per 1M output tokens",
                "At each candidate's SLO operating point; whiskers span all its runs.")),
    Section("comparison", 40, "Workloads: SLO capacity searches and batch jobs", "workloads",
            lambda p: workloads_table(p.latest)
            if any(r.slo_capacity or r.job for r in p.latest) else None),
    Section("comparison", 60, "Repeatability (steps run several times)", "repeatability",
            lambda p: repeatability_table(p.spreads)),
    Section("comparison", 70, "Regression check (latest run vs earlier runs)", "regression",
            lambda p: regression_table(p.latest, p.runs, p.slo)),
    Section("comparison", 90, "Gates", "gates", lambda p: gates_table(p.latest)),
    Section("comparison", 100, "Invalid steps and why", "invalid",
            lambda p: invalid_table(p.latest)),
    Section("comparison", 110, "Manifests side by side", "manifest",
            lambda p: side_by_side(p.latest)),
    Section("comparison", 120, "Cold start side by side", "cold-start",
            lambda p: cold_start_table(p.latest)),
    Section("comparison", 130, "Runs included", "runs", lambda p: runs_table(p.runs, p.latest)),
)


def render(runs: list[RunData], plots: dict[str, Path], slo: tuple[float, float],
           levels=None, page_dir: Path | None = None) -> str:
    latest = latest_per_candidate(runs)
    spreads = step_spreads(runs)
    any_emulated = any(r.emulated for r in latest)
    body = [
        "<h1>Candidate comparison</h1>",
        f'<p class="sub">{len(latest)} candidates, {len(runs)} runs; the latest run of each '
        "candidate is compared.</p>",
        *registry.render("comparison",
                         ComparisonPage(runs, latest, spreads, plots, slo, levels, page_dir)),
    ]
    banner = emulated_banner(EMULATED_TEXT) if any_emulated else ""
    title = f"{'EMULATED data - ' if any_emulated else ''}servingbench comparison"
    return page(title, "\n".join(body), banner)


def unique_runs(runs: list[RunData]) -> list[RunData]:
    """Drop a folder given twice; refuse one run_id in two different folders."""
    seen: dict[str, RunData] = {}
    for run in runs:
        other = seen.get(run.run_id)
        if other is not None and other.run_dir.resolve() != run.run_dir.resolve():
            raise ReportError(f"run_id {run.run_id!r} is in two folders: {other.run_dir} "
                              f"and {run.run_dir} (run ids are never reused)")
        seen[run.run_id] = run
    return list(seen.values())


LEVELS_FILE = "frontier_levels.parquet"


def write_comparison_report(run_dirs: list[Path | str], out_path: Path | str,
                            slo: tuple[float, float] | None = None,
                            levels: Sequence[float] = DEFAULT_LEVELS) -> Path:
    """Write one self-contained HTML comparing the latest run of each candidate among
    `run_dirs` (plots beside it in `<stem>_plots/`), and `frontier_levels.parquet` beside
    it (contract §3.6, at interactivity `levels`), and `spot_pairs.parquet` (§3.8: spot
    against on-demand per candidate); returns `out_path`."""
    if not run_dirs:
        raise ReportError("no run folders given")
    all_runs = unique_runs([load_run(d, raw=False) for d in run_dirs])
    slo = slo or slo_of(latest_per_candidate(all_runs))
    out = Path(out_path)
    plot_dir = out.parent / f"{out.stem}_plots"
    plots = write_comparison_plots(all_runs, plot_dir, *slo)
    table = levels_of_folders([r.run_dir for r in all_runs], slo[0], levels)
    for drawn in registry.plots("comparison"):
        plots |= drawn.draw(all_runs, plot_dir, slo, levels)
    write_parquet(check_output(table, "frontier_levels"), out.parent / LEVELS_FILE)
    write_parquet(check_output(pairs_of_folders([r.run_dir for r in all_runs]), "spot_pairs"),
                  out.parent / SPOT_PAIRS_FILE)
    return write_html(render(all_runs, plots, slo, table, out.parent), out)


PLUGIN = SECTIONS  # what this file adds to the report package
