"""The comparison's frontier (contract §3.6, §4.1): frontier_levels.parquet beside the page,
the two plots, the table of the cheapest candidate at each interactivity level, sweep
members drawn as one line, and the headline's short run id linking to the run's report."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from servingbench.pipelines.cli.report import main as report_main
from servingbench.resources.contract.outputs import FRONTIER_LEVELS
from servingbench.resources.report import write_comparison_report
from servingbench.resources.report.comparison import short_id
from servingbench.resources.report.frontier_plots import frontier_points, lines
from servingbench.resources.report.rundata import RunData

from tests.support.html import Page, check_safe


def _section(html: str, ident: str) -> str:
    start = html.index(f'id="{ident}"')
    return html[start:html.index("</section>", start)]


@pytest.fixture(scope="module")
def comparison(_pristine, tmp_path_factory) -> Path:
    """The comparison of the five runs, written once (runs/ beside out/, as a nightly
    folder has them) for the tests that only read it."""
    import shutil

    root = tmp_path_factory.mktemp("frontier")
    runs = [shutil.copytree(src, root / "runs" / src.name) for src in _pristine]
    return write_comparison_report(runs, root / "out" / "comparison.html")


def test_levels_file_plots_and_table(comparison):
    out = comparison
    html = out.read_text()
    page = check_safe(html)
    levels = pq.read_table(out.parent / "frontier_levels.parquet")
    assert levels.schema.names == FRONTIER_LEVELS.names
    rows = {(r["level_tok_s"], r["candidate"]): r for r in levels.to_pylist()}
    # 6 default levels × 3 candidates, a row each even where nothing is reached
    assert len(rows) == 18
    # the latest fast run (fast-2): its c=8 is invalid, so its pick is c=4 up to its reach
    assert rows[(50.0, "p5-scout-bf16-tp8")]["run_id"] == "fast-2"
    assert rows[(50.0, "p5-scout-bf16-tp8")]["step"] == "c=4"
    assert rows[(200.0, "p5-scout-bf16-tp8")]["step"] is None
    # the slow candidate's p99 TTFT is above the 2 s SLO at every step: it reaches no level
    assert all(rows[(v, "inf2-scout-bf16-tp24")]["step"] is None for v in (5, 10, 20, 50, 100, 200))
    # emulated and measured are ranked apart: both are 1 at 5 tok/s
    assert rows[(5.0, "g6e-scout-fp8-tp8")]["rank"] == 1 == rows[(5.0, "p5-scout-bf16-tp8")]["rank"]
    frontier = _section(html, "frontier")
    sub = Page(frontier)
    assert sum(1 for t, _ in sub.tags if t == "img") == 2
    assert "cheapest" in sub.plain and "runner-up" in sub.plain and "EMULATED" in sub.plain
    assert "what-if" in sub.plain.lower() and "never billed" in sub.plain
    for name in ("frontier_throughput.png", "frontier_cost.png"):
        assert (out.parent / "comparison_plots" / name).stat().st_size > 15_000
    assert page.tags  # the page as a whole is safe (check_safe above)


def test_headline_shows_a_short_id_linking_to_the_run_report(comparison):
    html = comparison.read_text()
    headline = _section(html, "headline")
    links = [a for t, a in Page(headline).tags if t == "a"]
    # "./" first: a folder name is never read as a URL scheme (the comparison's link rule)
    assert {a["href"] for a in links} == {"./../runs/fast-2/report.html",
                                          "./../runs/emu-0/report.html",
                                          "./../runs/slow-0/report.html"}
    run_id = "20261129T020000Z-p5.48xlarge-p5-scout-bf16-tp8-7f3a"
    assert short_id(run_id) == "20261129T020000Z\u20267f3a" and short_id("fast-2") == "fast-2"


def test_levels_flag_of_the_report_cli(runs, tmp_path, capsys):
    out = tmp_path / "cmp" / "comparison.html"
    # two runs of two candidates: the CLI writes each one's run report beside the comparison,
    # and the flag's effect is the same for two as for five
    assert report_main([str(runs[0]), str(runs[3]), "--out", str(out), "--levels", "7,70"]) == 0
    levels = pq.read_table(out.parent / "frontier_levels.parquet").to_pylist()
    assert sorted({r["level_tok_s"] for r in levels}) == [7.0, 70.0]
    assert "frontier levels:" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        report_main([*map(str, runs), "--out", str(out), "--levels", "0,5"])
    assert exit_.value.code == 2 and "--levels" in capsys.readouterr().err


def _run(candidate: str, points: list[tuple], sweep: str | None = None, itype="p5.48xlarge",
         what_if: list[tuple] | None = None) -> RunData:
    frontier = pd.DataFrame([{"run_id": candidate, "candidate": candidate, "step": s,
                              "source": "measured", "valid": v, "interactivity_tok_s": x,
                              "output_tok_s_per_accel": y, "cost_per_1m_output_usd": c}
                             for s, v, x, y, c in points])
    manifest = {"run_id": candidate, "candidate": candidate, "source": "measured",
                "instance_type": itype, "created_at": "2026-11-29T02:00:00Z"}
    if sweep:
        manifest["sweep"] = {"name": sweep, "settings": {}}
    wi = None if what_if is None else pd.DataFrame(
        [{"run_id": candidate, "step": s, "basis": b, "cost_per_1m_output_usd": c}
         for s, b, c in what_if])
    return RunData(Path(candidate), manifest, None, None, None, None, frontier=frontier,
                   what_if=wi)


def test_sweep_members_of_one_instance_type_are_one_frontier():
    a = _run("s-mns8", [("c=1", True, 50.0, 10.0, 5.0), ("c=8", True, 20.0, 40.0, 1.2)], "s")
    b = _run("s-mns64", [("c=1", True, 45.0, 12.0, 4.0), ("c=64", True, 8.0, 90.0, 0.6),
                         ("c=128", False, 30.0, 200.0, 0.2)], "s")
    c = _run("s-trn2", [("c=1", True, 40.0, 5.0, 9.0)], "s", itype="trn2.48xlarge")
    d = _run("plain", [("c=1", True, 60.0, 8.0, 6.0)])
    got = {line.label: line for line in lines([a, b, c, d])}
    assert set(got) == {"s on p5.48xlarge (2 settings)", "s on trn2.48xlarge", "plain"}
    front = frontier_points(got["s on p5.48xlarge (2 settings)"].points)
    # pooled over both members: all four valid points trade off; the invalid c=128, which
    # would beat three of them, never counts
    assert list(zip(front["run_id"], front["step"], strict=True)) == [
        ("s-mns64", "c=64"), ("s-mns8", "c=8"), ("s-mns64", "c=1"), ("s-mns8", "c=1")]


def test_run_report_shows_its_frontier_and_labels_what_if(runs):
    from servingbench.resources.report import write_run_report

    html = write_run_report(runs[0]).read_text()
    check_safe(html)
    text = Page(_section(html, "frontier")).plain
    assert "on the frontier" in text and "WHAT-IF basis" in text and "never billed" in text
    assert "spot_price_history" in text and "capacity_block" in text
    # the billed cost section never mentions a what-if basis
    assert "spot" not in Page(_section(html, "cost")).plain


def test_a_line_with_no_valid_step_draws_hollow_points_only():
    """A busy machine marks every step client-limited: no frontier, no crash."""
    from servingbench.resources.report.frontier_plots import (
        plot_frontier_cost,
        plot_frontier_throughput,
    )

    run = _run("busy", [("c=1", False, 50.0, 10.0, 5.0), ("c=4", False, 20.0, 40.0, 1.2)])
    (line,) = lines([run])
    assert frontier_points(line.points).empty and "interactivity_tok_s" in line.points
    assert plot_frontier_throughput([run], [5, 10]) is not None
    assert plot_frontier_cost([run], [5, 10]) is not None  # the invalid steps' costs, hollow


def test_a_member_that_failed_quality_parity_is_never_on_the_pooled_frontier():
    # two members, a valid step each; the faster one belongs to a member that failed parity
    good = _run("s-a", [("c=1", True, 36.9, 16.1, 2.0)], "s")
    bad = _run("s-b", [("c=1", True, 40.8, 17.9, 1.0)], "s")
    bad.parity = {"passed": False}
    (line,) = lines([good, bad])
    assert frontier_points(line.points)["run_id"].tolist() == ["s-a"]
    # without the verdict, the same two steps leave only the faster one
    bad.parity = None
    (line,) = lines([good, bad])
    assert frontier_points(line.points)["run_id"].tolist() == ["s-b"]


def test_the_cost_plots_legend_is_never_cut_at_the_images_edge(tmp_path):
    """Long candidate names make the legend below the cost plot wider than the plot: the
    saved image grows to hold it, so its left and right edges stay white."""
    import matplotlib.image as mpimg
    from servingbench.resources.report.frontier_section import write_plots

    what_if = [("c=1", "on_demand", 6.0), ("c=1", "spot", 2.0), ("c=8", "on_demand", 1.5),
               ("c=8", "spot", 0.5)]
    runs = [_run(f"maverick-{itype}-fp8-tp8-max-num-seqs-256-chunked-prefill", [
        ("c=1", True, 50.0 - i, 10.0, 5.0), ("c=8", True, 20.0 - i, 40.0, 1.2)],
        itype=itype, what_if=what_if) for i, itype in enumerate(("p5.48xlarge", "p4d.24xlarge"))]
    drawn = write_plots(runs, tmp_path, [5, 10])
    for name in ("frontier_cost", "frontier_throughput"):
        img = mpimg.imread(drawn[name])[..., :3]
        edges = img[:, [0, 1, -2, -1]]
        assert edges.min() > 0.99, name  # nothing drawn on (or cut at) the left or right edge
