"""The HTML reports: the expected sections and tables, the EMULATED banner exactly on
emulated content, inlined images only, and every string from a run escaped."""

from __future__ import annotations

import json
from pathlib import Path

from servingbench.resources.contract.manifest import dump, load
from servingbench.resources.report import write_comparison_report, write_run_report

from tests.support.html import Page, check_safe

HOSTILE_CANDIDATE = '<script>alert("c")</script>'
HOSTILE_MODEL = '"><img src=x onerror=alert(1)>'
HOSTILE_MESSAGE = "<b>bold</b> & 'quoted' </td></tr></table>"


def test_run_report_has_its_sections_and_tables(reports):
    out = reports["measured"]
    assert out.name == "report.html" and out.parent.name == "fast-0"
    html = out.read_text()
    page = check_safe(html)
    assert {"headline", "gates", "steps", "invalid", "cost", "plots", "manifest",
            "cold-start", "self-watch"} <= page.ids()
    assert sum(1 for t, _ in page.tags if t == "img") == 3
    assert sorted(p.name for p in (out.parent / "plots").iterdir()) == [
        "itl_cdf.png", "scaling.png", "ttft_cdf.png"]
    text = page.plain
    for fact in ("p5.48xlarge", "bf16", "sha256:abab", "on_demand", "price_list", "570.86.15",
                 "weights_load", "image_pull", "compile"):
        assert fact in text, fact
    assert "AWS Key Management Service KMS-Keys $1.00" in text  # excluded, not prorated
    # the invalid step and why
    assert "error_rate;achieved_concurrency" in text
    assert "error rate 8.3% > 1 % (4 of 48 requests failed)" in text
    # measured: no banner, no EMULATED anywhere
    assert "emulated-banner" not in page.ids() and "EMULATED" not in text


def test_emulated_run_report_carries_the_banner(reports):
    page = check_safe(reports["emulated"].read_text())
    assert "emulated-banner" in page.ids()
    assert page.plain.strip().startswith("EMULATED")
    assert "EMULATED" in next(d for d in page.text if "servingbench run" in d)  # <title>


def test_hostile_strings_are_escaped_and_measured_runs_compare_without_a_banner(runs):
    run = runs[0]
    m = load(run / "manifest.json")
    m.update(candidate=HOSTILE_CANDIDATE, model=HOSTILE_MODEL)
    dump(m, run / "manifest.json")
    gates = json.loads((run / "gates.json").read_text())
    gates[2]["message"] = HOSTILE_MESSAGE
    gates[2]["examples"] = ["<i>id</i>"]
    (run / "gates.json").write_text(json.dumps(gates))
    html = write_run_report(run).read_text()
    page = check_safe(html)
    for hostile in (HOSTILE_CANDIDATE, HOSTILE_MODEL, HOSTILE_MESSAGE, "<i>id</i>"):
        assert hostile not in html
        assert hostile in page.plain  # shown to the reader as text
    assert "&lt;script&gt;alert(&quot;c&quot;)&lt;/script&gt;" in html
    # the comparison of two measured runs: escaped there too, and no banner (one comparison
    # page proves both)
    cmp = write_comparison_report([run, runs[4]], run.parent / "cmp.html").read_text()
    page = check_safe(cmp)
    assert HOSTILE_CANDIDATE not in cmp and HOSTILE_CANDIDATE in page.plain
    assert "emulated-banner" not in page.ids() and "EMULATED" not in page.plain
    assert "Each step was run once per candidate" in page.plain


def _table_after(page_html: str, section_id: str) -> list[list[str]]:
    """Rows (cell texts) of the first table in the section with this id."""
    start = page_html.index(f'id="{section_id}"')
    chunk = page_html[start:page_html.index("</table>", start)]
    rows = []
    for tr in chunk.split("<tr")[1:]:
        p = Page("<tr" + tr)
        rows.append([t.strip() for t in p.text if t.strip()])
    return rows


def test_comparison_report_compares_latest_runs_with_spread(reports):
    out = reports["comparison"]
    html = out.read_text()
    page = check_safe(html)
    assert "emulated-banner" in page.ids()  # one candidate is emulated
    headline = _table_after(html, "headline")
    body = {row[1] if row[0].isdigit() else row[1]: row for row in headline[1:]}
    assert set(body) == {"p5-scout-bf16-tp8", "g6e-scout-fp8-tp8", "inf2-scout-bf16-tp24"}
    fast = body["p5-scout-bf16-tp8"]
    assert fast[0] == "1" and "fast-2" in fast and "3" in fast  # ranked, latest run, 3 runs
    assert any(c.startswith("median ") and "n=3" in c and "95 % CI" in c for c in fast)
    emu = body["g6e-scout-fp8-tp8"]
    assert emu[0] == "\u2014" and emu[2].startswith("EMULATED")  # emulated: never ranked
    assert "meets no step" in body["inf2-scout-bf16-tp24"]
    rep = _table_after(html, "repeatability")
    assert rep[0][:6] == ["candidate", "source", "step", "figure", "n", "min"]
    assert {r[2] for r in rep[1:]} == {"c=1", "c=2", "c=4"}  # c=8 is invalid: excluded
    assert all(r[0] == "p5-scout-bf16-tp8" and r[4] == "3" for r in rep[1:])
    assert sum(1 for t, _ in page.tags if t == "img") == 4  # two of them the frontier
    assert (out.parent / "comparison_plots" / "cost_per_1m.png").exists()
    runs_tbl = _table_after(html, "runs")
    assert [r[1] for r in runs_tbl[1:] if "earlier" in r] == ["fast-0", "fast-1"]


def test_gate_failure_shows_the_gates_and_withholds_cost(runs, tmp_path):
    from tests.support.runbuilder import FAST, simulated_run

    gated = simulated_run(tmp_path, FAST.__class__(**{**FAST.__dict__, "gate_fail": True}), "gated-0")
    html = write_run_report(gated).read_text()
    page = check_safe(html)
    assert "a gate failed, so cost rows are withheld" in page.plain
    assert "rejected by a gate" in page.plain
    gates = _table_after(html, "gates")
    assert gates[5][:3] == ["5", "scoped", "FAIL"]
    assert not Path(gated / "cost_per_1m.parquet").exists()


def test_load_only_run_without_bill_says_so(runs):
    run = runs[0]
    (run / "cost_per_1m.parquet").unlink()
    (run / "headline.parquet").unlink()
    gates = json.loads((run / "gates.json").read_text())
    for g in gates[4:]:
        g.update(passed=None, message="no bill")
    (run / "gates.json").write_text(json.dumps(gates))
    page = check_safe(write_run_report(run).read_text())
    assert "the run has no bill (a load-only run)" in page.plain
    assert "not checked" in page.plain and "accepted" in page.plain


def test_manifest_only_folder_still_reports_what_it_knows(runs):
    run = runs[4]
    for p in run.iterdir():
        if p.name != "manifest.json":
            p.unlink()
    html = write_run_report(run).read_text()
    page = check_safe(html)
    assert "the analyzer has not run on this folder" in page.plain
    assert "No raw request/chunk log" in page.plain
    assert "inf2.48xlarge" in page.plain and "weights_load" in page.plain
    assert sum(1 for t, _ in page.tags if t == "img") == 0


def test_comparison_shows_the_regression_check_of_each_latest_run(reports):
    from servingbench.resources.report.regression import compare_to_history, headline_record

    rows = _table_after(reports["comparison"].read_text(), "regression")
    by_candidate = {r[0]: r for r in rows[1:]}
    assert by_candidate["g6e-scout-fp8-tp8"][-1] == "no earlier run"
    fast = by_candidate["p5-scout-bf16-tp8"]
    root = reports["comparison"].parent.parent
    expected = compare_to_history(headline_record(root / "fast-2"),
                                  [headline_record(root / f"fast-{i}") for i in (0, 1)])
    assert fast[1:3] == ["fast-2", "2"]
    # fixture noise: p99 TTFT over 24 requests moves > 20 % between runs
    assert expected.metadata["regressed_metrics"] == ["ttft_s_p99"]
    assert fast[-1] == "WARN: ttft_s_p99"
    assert fast[4] == f"{expected.metadata['ttft_s_p99_change'] * 100:.1f} %"
