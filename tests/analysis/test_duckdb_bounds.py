"""The analyzer's DuckDB works within a memory limit, in a private scratch folder under TMPDIR
(its database file and spill files) that is gone when the analysis ends; a memory limit
DuckDB cannot read is bad input, named by its variable."""

from __future__ import annotations

import tempfile

import pytest
from servingbench.pipelines.cli import main as cli
from servingbench.resources.analysis.analyze import ACCEPTED, analyze_run
from servingbench.resources.analysis.rundir import MEMORY_ENV, open_run

from tests.support.runbuilder import clean_run


@pytest.fixture
def scratch_root(tmp_path, monkeypatch):
    root = tmp_path / "tmpdir"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def test_duckdb_is_bounded_and_works_in_a_scratch_folder_removed_at_the_end(tmp_path,
                                                                            scratch_root,
                                                                            monkeypatch):
    monkeypatch.setenv(MEMORY_ENV, "300MB")
    run_dir = clean_run().write(tmp_path / "run")
    with open_run(run_dir) as run:
        limit = run.con.sql("SELECT current_setting('memory_limit')").fetchall()[0][0]
        spill = run.con.sql("SELECT current_setting('temp_directory')").fetchall()[0][0]
        database = run.con.sql("SELECT path FROM duckdb_databases() WHERE NOT internal").fetchall()[0][0]
        assert run.scratch is not None and run.scratch.parent == scratch_root
        assert spill.startswith(str(run.scratch)) and database.startswith(str(run.scratch))
        assert limit.replace(" ", "").upper() in {"286.1MIB", "300.0MB", "300MB"}
        # no bar of DuckDB's own on stdout in the middle of the CLI's answer
        bar = run.con.sql("SELECT current_setting('enable_progress_bar')").fetchall()[0][0]
        assert bar is False
    assert list(scratch_root.iterdir()) == []
    assert analyze_run(run_dir).exit_code == ACCEPTED
    assert list(scratch_root.iterdir()) == []


def test_an_unreadable_memory_limit_exits_2_naming_the_variable(tmp_path, scratch_root,
                                                                 monkeypatch, capsys):
    monkeypatch.setenv(MEMORY_ENV, "plenty")
    run_dir = clean_run().write(tmp_path / "run")
    assert cli(["analyze", str(run_dir)]) == 2
    assert MEMORY_ENV in capsys.readouterr().err
    assert list(scratch_root.iterdir()) == []


def test_the_benchmarks_synthetic_run_is_accepted_by_the_analyzer(tmp_path):
    # The analyzer benchmarks (benchmarks/analyze_*.py) build their folders with
    # synthetic_run; a column added to the contract must reach it, or they stop at set-up.
    from tests.support.runbuilder import synthetic_run

    run_dir = synthetic_run(tmp_path / "run", 200, chunks=8, steps=(4,))
    result = analyze_run(run_dir, write=False)
    assert result.exit_code == ACCEPTED, result.gates
    (row,) = result.metrics.to_pylist()
    assert row["step"] == "c=4" and row["n_ok"] == 200


def test_a_run_larger_than_the_memory_limit_allows_is_75_naming_the_variable(tmp_path, capsys,
                                                                              monkeypatch):
    # Out of memory is the machine's limit, not bad input (never exit 2 "unreadable"): the
    # message names the variable to raise, and nothing is written or changed.
    from tests.support.runbuilder import synthetic_run

    run_dir = synthetic_run(tmp_path / "run", 2000, chunks=64, steps=(8,))
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    monkeypatch.setenv(MEMORY_ENV, "8MB")
    assert cli(["analyze", str(run_dir)]) == 75
    err = capsys.readouterr().err
    assert "out of memory" in err and f"{MEMORY_ENV}=8MB" in err and "unreadable" not in err
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before
