"""Every EMULATED figure carries the emulator's error band (deployment.json's recorded
`fidelity`), and two emulated candidates within each other's bands get no winner: in the
demo's terminal headline, the comparison's headline and its interactivity levels."""

from __future__ import annotations

import json
from pathlib import Path

from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.analysis.frontier import cheapest_by_level
from servingbench.resources.analysis.ranking import Standing, overlap, rank, within_bands
from servingbench.resources.analysis.summary import band_text, levels_text
from servingbench.resources.contract import deployment_record

from tests.support.runbuilder import clean_run


def band(mape: float | None, acc: str = "H100-SXM-80GB") -> dict:
    text = f"±{100 * mape:.0f} % vs 77 published {acc} measurements" if mape else "uncalibrated"
    return {"accelerator": acc, "engine": "vllm", "mape": mape, "text": text}


def emulated_run(root: Path, name: str, mape: float | None, cost_scale: float = 1.0) -> Path:
    """tests/support/runbuilder.py's clean run as candidate `name`, its price × cost_scale."""
    b = clean_run(run_id=name, hourly=55.04 * cost_scale, candidate=name)
    run_dir = b.write(root / name)
    deployment_record.write(run_dir, {"endpoint": "http://127.0.0.1:1", "emulated": True,
                                      "config": {"candidate": "p5.48xlarge",
                                                 "fidelity": band(mape)}})
    assert analyze_run(run_dir).exit_code == 0
    return run_dir


def test_overlap_is_symmetric_and_an_unknown_band_never_overlaps():
    assert overlap(100, 0.10, 115, 0.10) and overlap(115, 0.10, 100, 0.10)
    assert not overlap(100, 0.05, 120, 0.05)
    assert not overlap(100, None, 100, 0.5)


def test_neighbours_within_bands_get_no_winner_measured_ones_always_do():
    def st(name, cost, emulated=True, b=0.2):
        return Standing(name, {"meets_slo": True, "cost_per_1m_output_usd": cost}, emulated,
                        band=b if emulated else None)
    ranked = rank([st("a", 10.0), st("b", 11.0), st("c", 20.0), st("m1", 10.0, False),
                   st("m2", 10.5, False)])
    assert [(x.candidate, y.candidate) for x, y in within_bands(ranked)] == [("a", "b")]


def test_the_recorded_band_is_read_back_the_widest_of_several_models(tmp_path):
    deployment_record.write(tmp_path, {"endpoint": "x", "emulated": True, "config": {
        "a": {"fidelity": band(0.1)}, "b": {"fidelity": band(0.3)}}})
    assert deployment_record.fidelity(tmp_path)["mape"] == 0.3
    (tmp_path / "deployment.json").write_text("{not json")
    assert deployment_record.fidelity(tmp_path) is None  # an unreadable record: no band
    assert deployment_record.fidelity(tmp_path / "absent") is None
    assert band_text(band(0.123)) == "±12%" and band_text(None) == "uncalibrated"


def test_the_demo_headline_prints_each_band_and_names_no_winner_within_them(tmp_path, capsys):
    from servingbench.pipelines.cli.demo import print_headline

    a = emulated_run(tmp_path, "cand-a", 0.15)
    b = emulated_run(tmp_path, "cand-b", 0.20, cost_scale=1.1)  # 10 % dearer, bands overlap
    print_headline([str(a), str(b)])
    out = capsys.readouterr().out
    assert "error band" in out and "±15%" in out and "±20%" in out
    assert "no winner: cand-a and cand-b are within each other's error bands" in out


def test_a_clear_difference_still_has_a_cheapest(tmp_path, capsys):
    from servingbench.pipelines.cli.demo import print_headline

    a = emulated_run(tmp_path, "cand-a", 0.05)
    b = emulated_run(tmp_path, "cand-b", 0.05, cost_scale=2.0)
    print_headline([str(a), str(b)])
    assert "no winner" not in capsys.readouterr().out


def test_levels_name_both_candidates_when_within_bands():
    rows = [{"level_tok_s": 10.0, "source": "emulated", "candidate": c, "step": "c=4",
             "cost_per_1m_output_usd": cost, "rank": r}
            for c, cost, r in (("a", 10.0, 1), ("b", 10.8, 2))]
    (row,) = cheapest_by_level(rows, {"a": 0.1, "b": 0.1})
    assert row["within_bands"] and row["cheapest"] == "a"
    assert "a or b (within error bands)" in levels_text(rows, bands={"a": 0.1, "b": 0.1})
    (apart,) = cheapest_by_level(rows, {"a": 0.01, "b": 0.01})
    assert not apart["within_bands"]


def test_the_run_report_banner_carries_the_band(tmp_path):
    from servingbench.resources.report.run_report import write_run_report

    run_dir = emulated_run(tmp_path, "cand-a", 0.12)
    page = write_run_report(run_dir).read_text()
    assert "Error band: ±12 % vs 77 published H100-SXM-80GB measurements" in page
    assert json.loads((run_dir / "deployment.json").read_text())["config"]["fidelity"]["mape"] == 0.12
