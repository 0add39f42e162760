"""Telemetry in the reports: the time-series plot (present, step windows marked, not flat),
the per-step table with its flags, and the comparison's peak memory and utilization."""

from __future__ import annotations

import shutil

import pytest
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.report.comparison import write_comparison_report
from servingbench.resources.report.plots import plot_telemetry
from servingbench.resources.report.run_report import write_run_report
from servingbench.resources.report.rundata import load_run

from tests.support.runbuilder import clean_run


def run_with_telemetry(tmp_path, name="run"):
    b = clean_run()
    for i, ms in enumerate(range(0, 1600, 100)):
        busy = 1000 <= ms <= 1400
        for dev in ("gpu0", "gpu1"):
            b.sample(ms, dev, "accel_util", 0.9 if busy else 0.02)
            b.sample(ms, dev, "accel_mem_used_bytes", 60e9 + (17e9 if busy else 0.0))
            b.sample(ms, dev, "accel_mem_total_bytes", 80e9)
            b.sample(ms, dev, "power_w", 650.0 if busy else 80.0)
            b.sample(ms, dev, "energy_j", 1000.0 + i * 40.0)
        b.sample(ms, "engine", "kv_cache_usage", 1.0 if busy else 0.0, source="engine_metrics")
        b.sample(ms, "engine", "requests_running", 2.0 if busy else 0.0, source="engine_metrics")
    b.sample(1250, "all", "sample_error", None)
    run_dir = b.write(tmp_path / name)
    assert analyze_run(run_dir).exit_code == 0
    return run_dir


@pytest.fixture(scope="module")
def _analyzed(tmp_path_factory):
    """The run with telemetry, written and analysed once."""
    return run_with_telemetry(tmp_path_factory.mktemp("telemetry"))


@pytest.fixture
def telemetry_run(_analyzed, tmp_path):
    """A fresh copy per test, so a report written into one never leaks into another."""
    return shutil.copytree(_analyzed, tmp_path / _analyzed.name)


def test_time_series_plot_is_drawn_with_steps_marked_and_is_not_flat(telemetry_run):
    run = load_run(telemetry_run)
    fig = plot_telemetry(run)
    util_line = fig.axes[0].lines[0]
    y = util_line.get_ydata()
    assert max(y) - min(y) > 50  # 2 % idle → 90 % busy, in percent
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert "c=2" in labels and "warm-up" in labels
    assert len(fig.axes[0].patches) >= 2  # warm-up and the step's window shaded
    gaps = [line for line in fig.axes[0].lines if line.get_label() == "failed sample"]
    assert len(gaps) == 1 and len(gaps[0].get_xdata()) == 1
    power = fig.axes[2].lines[0].get_ydata()
    assert max(power) == 1300.0 and min(power) == 160.0  # both devices summed


def test_run_report_has_the_plot_and_the_flags(telemetry_run):
    run_dir = telemetry_run
    html = write_run_report(run_dir).read_text()
    png = run_dir / "plots" / "telemetry.png"
    assert png.exists() and png.stat().st_size > 10_000
    assert "telemetry over time" in html and "Accelerator telemetry per step" in html
    assert "KV cache full (peak 100%)" in html
    assert "memory headroom 3.7% &lt; 5%" in html  # 77 of 80 GB used: 3.75 % left


def test_comparison_shows_peak_memory_and_utilization(telemetry_run, tmp_path):
    out = tmp_path / "comparison.html"
    write_comparison_report([telemetry_run], out)
    html = out.read_text()
    section = html.split("Accelerator telemetry (peak memory, utilization, energy)")[1]
    section = section.split("</table>")[0]
    assert "71.7" in section         # 77e9 B = 71.71 GiB peak on a device
    assert "90.0 %" in section       # peak utilization
    assert "KV cache full" in section


def test_no_telemetry_no_plot(tmp_path):
    run_dir = clean_run().write(tmp_path / "run")
    analyze_run(run_dir)
    assert plot_telemetry(load_run(run_dir)) is None
    html = write_run_report(run_dir).read_text()
    assert "No telemetry in this run" in html
