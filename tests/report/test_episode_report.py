"""The episode, spot and several-model parts of the reports, from run folders the real
analyzer analysed: the run report's episode section and figure (contract §3.7), its
interruptions table (§3.8), its per-model table and figures (§3.9), and the comparison's
episodes side by side, cost-vs-attainment curve and spot pairs. The arithmetic the pages
add (cold-start bars, the curve, lost per interruption) is checked by hand; every other
number must be the analyzer's own, as the page formats it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.contract import manifest as mf
from servingbench.resources.report.comparison import write_comparison_report
from servingbench.resources.report.episode_comparison import on_curve
from servingbench.resources.report.episode_section import cold_start_bars, marks, plot_episode
from servingbench.resources.report.html import num, pct, usd
from servingbench.resources.report.run_report import write_run_report
from servingbench.resources.report.rundata import load_run

from tests.analysis.test_models import two_models
from tests.analysis.test_spot import pair_run, spot_run
from tests.support.browser import CHROMIUM, load_pages
from tests.support.runbuilder import T0, synthetic_episode

pytestmark = pytest.mark.slow  # several analyses and plots: not in `make check`

TS = pd.Timestamp(T0, tz="UTC")


def text(html: str, anchor: str) -> str:
    """The visible text of the section `anchor` (tags dropped, spaces folded)."""
    m = re.search(rf'<section id="{anchor}">(.*?)</section>', html, re.S)
    assert m, f"no section {anchor!r}"
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", m.group(1)))


def episode(root: Path, name: str, target: float, seed: int) -> Path:
    d = synthetic_episode(root / name, 1500, chunks=2, length_s=240, seed=seed,
                          per_replica_rps=target, max_replicas=4)
    m = json.loads((d / "manifest.json").read_text())
    m["candidate"] = name
    (d / "manifest.json").write_text(json.dumps(m))
    assert analyze_run(d).exit_code == 0
    return d


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("episodes")
    out = {"ep-8": episode(root, "ep-8", 8.0, 0), "ep-50": episode(root, "ep-50", 50.0, 1)}
    out["spot"] = spot_run().write(root / "spot")
    out["models"] = two_models("swapped").write(root / "models")
    out["od-1"] = pair_run("od-1", "2026-11-28T00:00:00Z", False, 55.04).write(root / "od-1")
    sp = pair_run("spot-1", "2026-11-28T01:00:00Z", True, 20.0,
                  replicas={"min": 2, "max": 2, "initial": 2})
    sp.manifest["phases"]["steady"] = {"started_at": mf.format_ts(T0),
                                       "ended_at": mf.format_ts(T0 + 2000 * 10**6)}
    sp.event("interruption_notice", "n0", 1900)
    out["spot-1"] = sp.write(root / "spot-1")
    for name in ("spot", "models", "od-1", "spot-1"):
        assert analyze_run(out[name]).exit_code == 0, name
    return out


def test_cold_start_bars_by_hand():
    up = {"direction": "up", "decided_at": TS, "replica_ready_s": 60.0, "image_pull_s": 15.0,
          "weights_load_s": 10.0, "compile_s": None, "graph_capture_s": 5.0,
          "first_token_s": 62.0}
    down = dict(up, direction="down", replica_ready_s=None)
    over = dict(up, replica_ready_s=20.0)  # phases longer than decision → ready: no wait
    bars = cold_start_bars([up, down, over])
    assert [b["segments"] for b in bars] == [
        {"wait_s": 30.0, "image_pull_s": 15.0, "weights_load_s": 10.0, "compile_s": 0.0,
         "graph_capture_s": 5.0},
        {"wait_s": 0.0, "image_pull_s": 15.0, "weights_load_s": 10.0, "compile_s": 0.0,
         "graph_capture_s": 5.0}]
    assert bars[0]["first_token_s"] == 62.0
    # the vertical marks: the scale rows' directions, then notices and interruptions only
    events = [{"kind": k, "at": TS} for k in ("scale_decision", "interruption_notice",
                                              "node_ready", "interruption")]
    assert [k for k, _ in marks([up, down], events)] == [
        "up", "down", "interruption_notice", "interruption"]


def test_the_curve_by_hand():
    pts = [{"source": "measured", "attainment": a, "cost": c} for a, c in
           ((0.90, 10.0), (0.95, 12.0), (0.90, 11.0), (0.99, 12.0))]
    pts.append({"source": "emulated", "attainment": 0.5, "cost": 1.0})
    # (0.90, 11) is beaten by (0.90, 10); (0.95, 12) by (0.99, 12); the emulated point is
    # cheaper than all but never compared with measured ones
    assert [p["on_curve"] for p in on_curve(pts)] == [True, False, False, True, True]


def test_episode_run_report_shows_the_analyzers_numbers(folders):
    d = folders["ep-8"]
    html = write_run_report(d).read_text()
    ep = json.loads((d / "episode.json").read_text())
    body = text(html, "episode")
    for shown in (num(ep["replica_seconds"] / 3600), num(ep["idle_replica_seconds"] / 3600),
                  usd(ep["idle_cost_usd"]), usd(ep["cost_per_1m_output_usd"]),
                  pct(ep["slo_attainment"]), f"{ep['scale_ups']} / {ep['scale_downs']}"):
        assert shown in body, shown
    assert "EMULATED" in body and "MEASURED" not in body
    scale = pq.read_table(d / "scale_events.parquet").to_pylist()
    assert len(scale) == ep["scale_ups"] + ep["scale_downs"] > 0
    assert body.count(" up ") + body.count(" down ") == len(scale)
    assert (d / "plots" / "episode.png").stat().st_size > 10_000
    assert 'alt="episode at a glance"' in html
    fig = plot_episode(load_run(d), 2.0)
    assert len(fig.axes) == 4 and fig.axes[0].get_title().startswith("EMULATED")
    # a scale-up's bar and each changing decision's line on every panel
    assert len(fig.axes[3].patches) >= ep["scale_ups"]
    assert all(sum(1 for ln in ax.get_lines() if list(ln.get_xdata()) ==
                   [ln.get_xdata()[0]] * 2) >= len(scale) for ax in fig.axes)


def test_an_episode_without_a_scale_up_still_draws(folders):
    d = folders["ep-50"]  # one replica serves the whole day: no scale event
    assert pq.read_table(d / "scale_events.parquet").num_rows == 0
    fig = plot_episode(load_run(d), 2.0)
    assert [t.get_text() for t in fig.axes[3].texts] == ["no scale-up in this episode"]
    assert "No scale decision changed the replica count." in write_run_report(d).read_text()


def test_plain_run_has_no_episode_or_models_section(folders):
    html = write_run_report(folders["od-1"]).read_text()
    assert 'id="episode"' not in html and 'id="models"' not in html


def test_spot_run_report_lists_each_interruption(folders):
    html = write_run_report(folders["spot"]).read_text()
    body = text(html, "episode")
    # test_spot's run: n1 noticed at 10 s, gone at 14 s, 3 in flight, 2 lost, both resent
    # ok, drained in 4 s, replaced 6 s after; n0 noticed at 30 s and survived
    assert " n1 " in body and " 3 2 2 4 6 " in body, body
    assert " n0 " in body and " 1 0 0 1 \u2014 " in body, body


def test_models_run_report_labels_attribution(folders):
    d = folders["models"]
    html = write_run_report(d).read_text()
    body = text(html, "models")
    rows = {r["model"]: r for r in pq.read_table(d / "derived_metrics_by_model.parquet").to_pylist()}
    # big: 0.5 s during small's wake, 0.1 s outside (test_models' hand-computed run)
    assert " big swapped 60.0 % 3 3 " in body
    assert f"{num(0.5)} {num(0.1)} {usd(rows['big']['attributed_cost_per_1m_output_usd'])}" in body
    assert "ATTRIBUTED" in body and "BILLED" in body
    for name in ("model_swaps", "model_placement"):
        assert (d / "plots" / f"{name}.png").exists()


def test_comparison_shows_episodes_curve_and_spot_pairs(folders, tmp_path):
    dirs = []
    for name in ("ep-8", "ep-50", "od-1", "spot-1"):
        shutil.copytree(folders[name], tmp_path / name)
        dirs.append(tmp_path / name)
    html = write_comparison_report(dirs, tmp_path / "comparison.html").read_text()
    eps = text(html, "episodes")
    for name in ("ep-8", "ep-50"):
        ep = json.loads((tmp_path / name / "episode.json").read_text())
        assert f"{name} " in eps and usd(ep["cost_per_1m_output_usd"]) in eps
        assert num(ep["replica_seconds"] / 3600) in eps
    assert "target=8.0" in eps and "target=50.0" in eps
    curve = text(html, "cost-attainment")
    assert "cheapest at this attainment" in curve
    assert (tmp_path / "comparison_plots" / "cost_attainment.png").exists()
    [pair] = pq.read_table(tmp_path / "spot_pairs.parquet").to_pylist()
    spot = text(html, "spot")
    assert f"cand {pct(pair['effective_discount'])}" not in spot  # cells are in order:
    assert (f"{usd(pair['on_demand_cost_per_1m_output_usd'])} "
            f"{usd(pair['spot_cost_per_1m_output_usd'])} {pct(pair['effective_discount'])} "
            f"{pct(pair['what_if_spot_discount'])} 1 0 0 ") in spot, spot


@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent: install "
                    "Debian's `chromium` package (.ci/run does)")
def test_episode_pages_render_in_chromium(folders, tmp_path):
    """The episode run report (its figure), the several-model run report (its two figures)
    and the comparison (episodes, curve, spot pairs) in a real headless Chromium: every
    image decoded, no console error, the new sections laid out with their numbers."""
    dirs = {}
    for name in ("ep-8", "ep-50", "models", "od-1", "spot-1"):
        shutil.copytree(folders[name], tmp_path / name)
        dirs[name] = tmp_path / name
    pages = [write_run_report(dirs["ep-8"]), write_run_report(dirs["models"]),
             write_comparison_report(list(dirs.values()), tmp_path / "comparison.html")]
    loads = load_pages(pages, tmp_path / "profile")
    for page in loads:
        assert page.errors == []
        assert all(done and w > 300 and h > 100 for done, w, h in page.facts["images"])
    run, models, comparison = (p.facts for p in loads)
    assert "replica-hours" in run["sections"]["episode"]
    assert "ATTRIBUTED" in models["sections"]["models"]
    assert len(models["images"]) == len(run["images"]) + 1  # swaps and placement, no episode
    for anchor in ("episodes", "cost-attainment", "spot"):
        assert anchor in comparison["sections"], anchor
    assert "effective discount" in comparison["sections"]["spot"]
    assert len(comparison["images"]) == 5  # the four of every comparison and the curve
