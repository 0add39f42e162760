"""Plot files exist, are real pictures (size, dimensions, many colours, opaque white
background) and say EMULATED exactly when they show emulated data."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
from servingbench.resources.report import plots
from servingbench.resources.report.rundata import load_run


def assert_real_png(path: Path, min_w: int = 600, min_h: int = 400) -> np.ndarray:
    assert path.exists() and path.stat().st_size > 15_000, path
    img = mpimg.imread(path)
    h, w = img.shape[:2]
    assert w >= min_w and h >= min_h, (w, h)
    rgb = img[..., :3].reshape(-1, 3)
    # not one flat colour: many distinct colours and real contrast
    packed = (rgb * 255).round().astype(np.int64) @ np.array([65536, 256, 1])
    assert len(np.unique(packed)) > 50
    assert rgb.std() > 0.05
    if img.shape[2] == 4:
        assert img[..., 3].min() == 1.0, "transparent pixels read badly on dark backgrounds"
    assert np.allclose(img[0, 0, :3], 1.0) and np.allclose(img[-1, -1, :3], 1.0), "white corners"
    return img


def test_run_plots_are_written_and_non_trivial(runs, tmp_path):
    run = load_run(runs[0])
    out = plots.write_run_plots(run, tmp_path / "plots", 2.0, 0.1)
    assert set(out) == {"ttft_cdf", "itl_cdf", "scaling"}
    for path in out.values():
        assert path.parent == tmp_path / "plots"
        assert_real_png(path)
    assert not list((tmp_path / "plots").glob("*.tmp"))


def test_comparison_plots_are_written_and_non_trivial(runs, tmp_path):
    loaded = [load_run(r, raw=False) for r in runs]
    out = plots.write_comparison_plots(loaded, tmp_path / "cmp", 2.0, 0.1)
    assert set(out) == {"latency_throughput", "cost_per_1m"}
    img = assert_real_png(out["latency_throughput"], min_w=1000)
    assert img.shape[1] > img.shape[0]  # two panels side by side
    assert_real_png(out["cost_per_1m"])


def _titles(fig) -> str:
    texts = [ax.get_title() for ax in fig.axes]
    if fig._suptitle is not None:
        texts.append(fig._suptitle.get_text())
    return " | ".join(texts)


@pytest.mark.parametrize("kind", ["ttft", "itl"])
def test_emulated_run_plots_say_emulated_and_measured_ones_do_not(runs, kind):
    measured, emulated = load_run(runs[0]), load_run(runs[3])
    assert emulated.emulated and not measured.emulated
    assert "EMULATED" in _titles(plots.plot_cdf(emulated, kind, 2.0))
    assert "EMULATED" in _titles(plots.plot_scaling(emulated, 2.0))
    assert "EMULATED" not in _titles(plots.plot_cdf(measured, kind, 2.0))
    assert "EMULATED" not in _titles(plots.plot_scaling(measured, 2.0))


def test_comparison_with_one_emulated_candidate_says_so(runs):
    loaded = [load_run(r, raw=False) for r in runs]
    latest = plots.latest_per_candidate(loaded)
    fig = plots.plot_latency_throughput(latest, 2.0, 0.1)
    assert "EMULATED" in _titles(fig)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "g6e-scout-fp8-tp8 (EMULATED)" in labels and "p5-scout-bf16-tp8" in labels
    measured_only = [r for r in latest if not r.emulated]
    assert "EMULATED" not in _titles(plots.plot_latency_throughput(measured_only, 2.0, 0.1))


def test_latency_throughput_draws_every_step_and_the_slo_lines(runs):
    latest = plots.latest_per_candidate([load_run(r, raw=False) for r in runs])
    fig = plots.plot_latency_throughput(latest, 2.0, 0.1)
    tpot_ax, ttft_ax = fig.axes[:2]
    slo_lines = [ln for ln in tpot_ax.get_lines() if ln.get_label().startswith("TPOT SLO")]
    assert len(slo_lines) == 1 and list(slo_lines[0].get_ydata()) == [0.1, 0.1]
    assert any(ln.get_label().startswith("TTFT SLO") for ln in ttft_ax.get_lines())
    series = [ln for ln in tpot_ax.get_lines() if not ln.get_label().startswith("TPOT SLO")]
    assert len(series) == 3 and all(len(ln.get_xdata()) == 4 for ln in series)


def test_cost_bars_show_candidates_meeting_no_step_and_gate_failures(runs, tmp_path):
    from tests.support.runbuilder import FAST, simulated_run

    failed = simulated_run(tmp_path, FAST.__class__(**{**FAST.__dict__, "candidate": "p4d-gated",
                                                    "gate_fail": True}), "gated-0")
    latest = plots.latest_per_candidate([load_run(r, raw=False) for r in [*runs, failed]])
    fig = plots.plot_cost(latest)
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert "meets no SLO step" in texts and "no cost: gate failed" in texts
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["g6e-scout-fp8-tp8 (EMULATED)", "inf2-scout-bf16-tp24", "p4d-gated",
                     "p5-scout-bf16-tp8"]
    bars = [p.get_height() for p in ax.patches]
    fast_cost = latest[-1].headline["cost_per_1m_output_usd"].iloc[0]
    assert bars[-1] == pytest.approx(fast_cost)
    assert f"${fast_cost:,.2f}" in texts


def test_run_without_raw_records_skips_the_cdfs(runs, tmp_path):
    (runs[0] / "chunk_log.parquet").unlink()
    (runs[0] / "steady_state_request_log.parquet").unlink()
    out = plots.write_run_plots(load_run(runs[0]), tmp_path / "p", 2.0, 0.1)
    assert set(out) == {"scaling"}


def test_dollar_signs_and_markup_in_names_are_plain_text(runs, tmp_path):
    from servingbench.resources.contract.manifest import dump, load

    m = load(runs[4] / "manifest.json")
    m["candidate"] = r"$\notacommand{x}_$ <b>"
    dump(m, runs[4] / "manifest.json")
    latest = plots.latest_per_candidate([load_run(r, raw=False) for r in runs])
    fig = plots.plot_cost(latest)
    assert r"$\notacommand{x}_$ <b>" in [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert_real_png(plots.save(fig, tmp_path / "cost.png"))


def test_open_loop_steps_are_drawn_against_achieved_concurrency(runs):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = runs[0] / "derived_metrics.parquet"
    t = pq.read_table(path)
    t = t.set_column(t.column_names.index("load_mode"), "load_mode",
                     pa.array(["rate"] * t.num_rows))
    pq.write_table(t, path)
    run = load_run(runs[0], raw=False)
    fig = plots.plot_scaling(run, 2.0)
    assert fig.axes[0].get_xlabel() == "achieved concurrency"
    xs = sorted(fig.axes[0].get_lines()[0].get_xdata())
    assert xs == sorted(run.metrics["achieved_concurrency"])
