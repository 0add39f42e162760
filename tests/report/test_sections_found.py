"""A report section is one file: it declares its sections and plots (`PLUGIN`, registry.py),
each naming its report and its place in the order, and both reports render what the files declare. Checked
on a package of dropped-in files, and on the real reports' order."""

from __future__ import annotations

import pytest
from servingbench.resources.report import registry

from tests.support.droppedin import package

QUEUE = '''
from servingbench.resources.report.registry import Plots, Section

DRAWS = (Plots("run", 30, lambda run, out_dir, slo_ttft_s, slo_tpot_s: {},
               {"queue": ("queue depth", "Requests waiting, per step.")}),)
SECTIONS = (
    Section("run", 65, "Queue depth", "queue", lambda p: "<p>q</p>" if p.run else None),
    Section("comparison", 85, "Queue depth side by side", "queue", lambda p: "<p>qq</p>"),
)
PLUGIN = (*SECTIONS, *DRAWS)
'''


def test_a_dropped_in_section_file_is_found_in_its_report_and_place(tmp_path, monkeypatch):
    pkg = package(tmp_path, monkeypatch, {"queue.py": QUEUE, "html.py": "X = 1\n",
                                          "late.py": QUEUE.replace("65", "5").replace(
                                              "85", "95").replace('"queue"', '"late"')})
    found = registry.discover(pkg)
    assert [(s.anchor, s.order) for s in found["run"]] == [("late", 5), ("queue", 65)]
    assert [(s.anchor, s.order) for s in found["comparison"]] == [("queue", 85), ("late", 95)]
    assert found["run"][1].body(registry.RunPage(run=None, plots={}, reconciliation=None)) is None
    # and what the files draw for the run report, in order, with their captions
    assert [p.order for p in found["run plots"]] == [30, 30]
    assert [list(p.captions) for p in found["run plots"]] == [["late"], ["queue"]]


@pytest.mark.parametrize(("source", "says"), [
    ("PLUGIN = ('not a section',)\n", r"must end with PLUGIN = \(Section"),
    ("X = 1\n", r"must end with PLUGIN = .*\(got nothing\)"),  # not a helper: declares
    (QUEUE.replace('"run"', '"nightly"'), "report 'nightly' is not one of run, comparison"),
    (QUEUE.replace('Plots("run"', 'Plots("nightly"'), "plots for report 'nightly'"),
    (QUEUE.replace('"queue", lambda p: "<p>qq', '"telemetry", lambda p: "<p>qq'),
     "takes the place of"),
])
def test_a_malformed_section_file_fails_loudly_naming_the_file(tmp_path, monkeypatch, source,
                                                               says):
    taken = QUEUE.replace("65", "100").replace("85", "80").replace('"queue"', '"telemetry"')
    files = {"zz_broken.py": source, "telemetry.py": taken}
    with pytest.raises(ImportError, match=says) as err:
        registry.discover(package(tmp_path, monkeypatch, files))
    assert "zz_broken.py" in str(err.value)


def test_the_reports_keep_their_sections_in_their_order():
    assert [s.anchor for s in registry.sections("run")] == [
        "headline", "gates", "steps", "episode", "models", "reasoning", "speculative", "context", "invalid", "cost",
        "frontier", "job", "slo-search", "telemetry", "plots", "reconciliation", "manifest",
        "cold-start", "self-watch"]
    assert [s.anchor for s in registry.sections("comparison")] == [
        "headline", "frontier", "episodes", "cost-attainment", "spot", "plots", "workloads", "reasoning", "repeatability",
        "regression", "telemetry", "gates", "invalid", "manifest", "cold-start", "runs"]
    # the plots a section's file draws come after plots.py's, in the files' order
    assert [name for p in registry.plots("run") for name in p.captions] == [
        "server_ttft", "ttft_by_context", "episode", "model_swaps", "model_placement"]
