"""`servingbench report`: writes what it says, and bad input gets one clear line, exit 2,
no traceback, and leaves the run folder untouched."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from servingbench.pipelines.cli.report import expand, main


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.is_file()}


def test_one_folder_writes_its_report(runs, tmp_path, capsys):
    assert main([str(runs[4]), "--out", str(tmp_path / "slow.html")]) == 0
    out = capsys.readouterr().out
    assert out.strip() == f"run report: {tmp_path / 'slow.html'}"
    assert "meets no step" in (tmp_path / "slow.html").read_text()
    assert not (runs[4] / "report.html").exists()


def test_a_folder_of_runs_stands_for_its_runs(runs, tmp_path, capsys):
    import shutil

    root = tmp_path / "nightly"
    for run in (runs[3], runs[4]):
        shutil.copytree(run, root / run.name)
    assert main([str(root)]) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == [
        f"comparison report: {root.resolve() / 'comparison.html'}",
        f"frontier levels: {root.resolve() / 'frontier_levels.parquet'}"]
    assert (root / "frontier_levels.parquet").is_file()
    assert (root / "comparison_plots").is_dir()
    assert all((root / r.name / "report.html").exists() for r in (runs[3], runs[4]))
    # again: the comparison's own outputs beside the runs are not mistaken for runs (the
    # folder as main expands it; writing the same reports again would prove nothing more,
    # and --out for a comparison is test_frontier_report.py's --levels test)
    assert expand([root]) == [root / runs[3].name, root / runs[4].name]


def test_a_folder_with_no_run_in_it(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    err = _fails([str(tmp_path / "empty")], capsys)
    assert "empty/manifest.json: missing" in err


def _fails(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert captured.err.startswith("servingbench report: ")
    assert len(captured.err.strip().splitlines()) == 1
    return captured.err


def test_missing_folder(tmp_path, capsys):
    assert "not a run folder" in _fails([str(tmp_path / "nope")], capsys)


def test_bad_manifest_names_the_file_and_key_and_loses_nothing(runs, capsys):
    m = json.loads((runs[0] / "manifest.json").read_text())
    m["candidat"] = m.pop("candidate")
    (runs[0] / "manifest.json").write_text(json.dumps(m))
    before = _digest(runs[0])
    err = _fails([str(runs[0])], capsys)
    assert "manifest.json" in err and "'candidat'" in err
    assert _digest(runs[0]) == before  # nothing written, nothing lost


def test_derived_metrics_missing_a_column_is_named(runs, capsys):
    path = runs[1] / "derived_metrics.parquet"
    pq.write_table(pq.read_table(path).drop(["tpot_s_p99"]), path)
    before = _digest(runs[1])
    err = _fails([str(runs[0]), str(runs[1])], capsys)
    assert "derived_metrics.parquet" in err and "'tpot_s_p99'" in err
    assert _digest(runs[1]) == before
    assert not (runs[0] / "report.html").exists()  # checked all folders before writing


def test_mistyped_columns_and_gates_are_named(runs, capsys):
    import pyarrow as pa

    path = runs[2] / "derived_metrics.parquet"
    table = pq.read_table(path)
    i = table.column_names.index("valid")
    pq.write_table(table.set_column(i, "valid", table["valid"].cast(pa.string())), path)
    err = _fails([str(runs[2])], capsys)
    assert "derived_metrics.parquet: column 'valid' has type string, expected a bool" in err
    gates = json.loads((runs[3] / "gates.json").read_text())
    gates[0]["passed"] = "yes"
    (runs[3] / "gates.json").write_text(json.dumps(gates))
    assert "gate [0] 'passed' must be true, false or null" in _fails([str(runs[3])], capsys)


def test_unreadable_gates_and_chunk_log(runs, capsys):
    (runs[2] / "gates.json").write_text("{not json")
    assert "gates.json: not valid JSON" in _fails([str(runs[2])], capsys)
    (runs[3] / "chunk_log.parquet").write_bytes(b"garbage")
    assert "chunk_log.parquet" in _fails([str(runs[3])], capsys)


def test_one_slo_flag_alone_is_refused(runs, capsys):
    assert "both --slo-ttft-s and --slo-tpot-s" in _fails(
        [str(runs[0]), "--slo-ttft-s", "1"], capsys)


def test_same_run_id_in_two_folders_is_refused(runs, tmp_path, capsys):
    import shutil

    twin = tmp_path / "elsewhere" / runs[0].name
    shutil.copytree(runs[0], twin)
    err = _fails([str(runs[0]), str(twin), "--out", str(tmp_path / "c.html")], capsys)
    assert "is in two folders" in err
    assert not (runs[0] / "report.html").exists() and not (tmp_path / "c.html").exists()


def test_no_argument_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2


def test_servingbench_report_through_the_top_level_cli(runs, capsys):
    from servingbench.pipelines.cli import main as servingbench

    assert servingbench(["--help"]) == 0
    assert "report     write HTML reports of run folders" in capsys.readouterr().out
    assert servingbench(["report", str(runs[3])]) == 0
    assert capsys.readouterr().out.strip() == f"run report: {runs[3] / 'report.html'}"
    page = (runs[3] / "report.html").read_text()
    assert "EMULATED" in page and "No server_metrics.json in the folder" in page
    assert servingbench(["report", str(runs[3] / "nope")]) == 2
    assert "not a run folder" in capsys.readouterr().err


def test_a_broken_server_metrics_file_is_a_clear_error_before_anything_is_written(runs, capsys):
    (runs[0] / "server_metrics.json").write_text("{not json")
    before = _digest(runs[1])
    assert main([str(runs[1]), str(runs[0])]) == 2
    assert "server_metrics.json: not valid JSON" in capsys.readouterr().err
    assert _digest(runs[1]) == before and not (runs[1] / "report.html").exists()
