"""A batch job's job.json (contract §3.4) and an SLO search's slo_capacity.json (§3.5) in
the HTML reports: written by the real analyzer, rendered in a real headless Chromium, and a
malformed file is a clear error naming the file and the key."""

from __future__ import annotations

import json

import pytest
from servingbench.pipelines.cli import report as report_cli
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.report import write_comparison_report, write_run_report
from servingbench.resources.report.rundata import ReportError, load_run

from tests.support.browser import CHROMIUM, load_pages
from tests.support.html import check_safe
from tests.support.runbuilder import RunBuilder


def _batch(tmp_path):
    b = RunBuilder(run_id="batch-1", hourly=36.0)
    b.manifest["candidate"] = "batch-candidate"
    b.manifest["scenario"] = {"kind": "batch", "requests": 3, "max_in_flight": 2,
                              "input_tokens": 4096, "output_tokens": 64}
    b.request("c=2", sent=1000, chunks=[(2000, 1), (2100, 1), (2200, 1)], finished=2200)
    b.request("c=2", sent=1000, chunks=[(3000, 1), (3100, 1)], finished=3100, sched=1000)
    b.request("c=2", sent=2200, chunks=[(4000, 2), (4500, 3)], finished=4600, sched=2200)
    b.hourly_bill(rate=36.0)
    return b.write(tmp_path / "batch-1")


def _search(tmp_path):
    # rate=1, 2 met; rate=4 missed; rate=3 met: capacity 3, bracket [3, 4]; at $36/h the
    # capacity step's 0.37 s window and 6 tokens cost $616.67 per 1M output tokens
    b = RunBuilder(run_id="search-1", hourly=36.0)
    b.manifest["candidate"] = "search-candidate"
    b.slo_search_probes()
    b.hourly_bill(rate=36.0)
    return b.write(tmp_path / "search-1")


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    root = tmp_path_factory.mktemp("workloads")
    batch, search = _batch(root), _search(root)
    assert analyze_run(batch).exit_code == 0 and analyze_run(search).exit_code == 0
    return batch, search


@pytest.fixture(scope="module")
def pages(analyzed, tmp_path_factory):
    """The batch and search run reports and their comparison, written once: the checks on
    their text and the real browser read the same files."""
    batch, search = analyzed
    out = tmp_path_factory.mktemp("pages")
    return (write_run_report(batch, out / "batch.html"), write_run_report(search, out / "search.html"),
            write_comparison_report(list(analyzed), out / "c.html"))


def test_run_reports_show_the_job_and_the_search(pages):
    job_page = check_safe(pages[0].read_text())
    assert "job" in job_page.ids() and "slo-search" not in job_page.ids()
    text = job_page.plain
    assert "Batch job (job.json)" in text and "makespan (s)" in text and "$0.036" in text
    page = check_safe(pages[1].read_text())
    assert "slo-search" in page.ids() and "job" not in page.ids()
    assert "SLO capacity search (slo_capacity.json)" in page.plain
    assert "$616.67" in page.plain  # the SLO cost, in the search section and the headline
    assert "SLO cost USD / 1M output tok" in page.plain and "search capacity" in page.plain


def test_comparison_shows_each_candidates_search_and_job(pages):
    page = check_safe(pages[2].read_text())
    assert "workloads" in page.ids()
    text = page.plain.split("Workloads: SLO capacity searches and batch jobs")[1]
    assert "search-candidate" in text and "batch-candidate" in text
    assert "[3, 4]" in text and "$616.67" in text and "$0.036" in text


@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent (Debian's "
                    "`chromium` package)")
def test_the_sections_render_in_a_real_browser(pages, tmp_path):
    b, s, c = load_pages(list(pages), tmp_path / "profile")
    for loaded in (b, s, c):
        assert loaded.errors == []
    job = b.facts["sections"]["job"]
    assert "cost per job" in job and "$0.036" in job
    search_text = s.facts["sections"]["slo-search"]
    assert "capacity" in search_text and "[3, 4]" in search_text
    assert "$616.67" in search_text and "rate=4" in search_text and "missed" in search_text
    assert "$616.67" in s.facts["sections"]["headline"]
    assert "search-candidate" in c.facts["sections"]["workloads"]


@pytest.mark.parametrize("name, edit, message", [
    ("job.json", lambda d: d.pop("makespan_s"), "missing key 'makespan_s'"),
    ("job.json", lambda d: d.update(ok="three"), "'ok' must be a number or null"),
    ("slo_capacity.json", lambda d: d.update(load_mode="sessions"), "'load_mode' must be one of"),
    ("slo_capacity.json", lambda d: d["probes"][0].pop("met"), "probe [0] must have keys"),
    ("slo_capacity.json", lambda d: d.update(interval=[3]), "'interval' must be [met, not_met]"),
])
def test_a_malformed_workload_file_names_the_file_and_key(analyzed, tmp_path, capsys, name,
                                                          edit, message):
    import shutil

    src = analyzed[0] if name == "job.json" else analyzed[1]
    run = tmp_path / src.name
    shutil.copytree(src, run)
    doc = json.loads((run / name).read_text())
    edit(doc)
    (run / name).write_text(json.dumps(doc))
    with pytest.raises(ReportError) as caught:
        load_run(run)
    assert f"{run / name}: " in str(caught.value) and message in str(caught.value)
    assert report_cli.main([str(run)]) == 2
    err = capsys.readouterr().err
    assert name in err and "Traceback" not in err


def test_a_run_measured_on_this_host_names_the_host_and_a_plain_run_has_no_workloads(tmp_path):
    from servingbench.resources.analysis.summary import render
    from servingbench.resources.cluster.host import describe_host, host_facts

    from tests.support.runbuilder import clean_run

    b = clean_run()
    host = describe_host(host_facts())
    b.manifest.update(source="measured", cluster_name="local:box", nodegroup=host,
                      instance_ids=["box"])
    run = b.write(tmp_path / "measured")
    a = analyze_run(run)
    assert f"MEASURED on {host}" in render(a)
    page = check_safe(write_run_report(run).read_text())
    assert "measured-host" in page.ids() and f"measured on {host}" in page.plain
    # an emulated run on the same host is never presented as measured on it
    emulated = clean_run()
    emulated.manifest.update(cluster_name="local:box", nodegroup=host)
    run = emulated.write(tmp_path / "emulated")
    assert "MEASURED on" not in render(analyze_run(run))
    page = check_safe(write_run_report(run).read_text())
    assert "measured-host" not in page.ids()
    # a run without workloads (clean_run has neither job.json nor slo_capacity.json) has no
    # such section
    assert not (run / "job.json").exists() and not (run / "slo_capacity.json").exists()
    assert not {"job", "slo-search"} & page.ids()
    assert "search capacity" not in page.plain
