"""One reader per run-folder file (resources/contract/run_files.py, deployment_record.py): the
same strictness wherever a file is read, "accepted" and "the latest run of each candidate"
decided once, and two SQL macros (sql/slo_met.sql, sql/overlap_ns.sql) instead of the rule
spelt in every query. The guards read the tree: a file name spelt outside its reader, or the
overlap expression outside its macro, fails them; each is shown to find what it looks for."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import duckdb
import pytest
from servingbench.resources.analysis import sqlfiles
from servingbench.resources.analysis.frontier import LevelRun, latest_accepted
from servingbench.resources.analysis.rundir import connect
from servingbench.resources.contract import deployment_record, run_files
from servingbench.resources.contract.outputs import GATE_KEYS
from servingbench.resources.report.rundata import ReportError, load_run

from tests.support.runbuilder import clean_run

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("pipelines", "assets", "resources")
# each file name -> the one module that names it (its reader; the writer of events.parquet
# takes the name from it too)
READERS = {"gates.json": "resources/contract/run_files.py",
           "episode.json": "resources/contract/run_files.py",
           "events.parquet": "resources/contract/run_files.py",
           "deployment.json": "resources/contract/deployment_record.py"}


def _gate(rule: int, passed) -> dict:
    return {"rule": rule, "name": f"rule {rule}", "passed": passed, "offending_rows": 0,
            "examples": [], "message": ""}


def test_accepted_is_decided_once():
    assert run_files.accepted(None) is None  # not gated
    assert run_files.accepted([]) is False  # gated by nothing: not accepted
    assert run_files.accepted([_gate(1, True), _gate(6, None)]) is True  # not run: no reject
    assert run_files.accepted([_gate(1, True), _gate(2, False)]) is False


@pytest.mark.parametrize("doc, says", [
    ({"rule": 1}, "is not"),  # a dict, not a list
    ([{**_gate(1, True), "passed": "yes"}], "'passed' must be true, false or null"),
    ([{**_gate(1, True), "passed": 1}], "'passed' must be true, false or null"),
    ([{k: v for k, v in _gate(1, True).items() if k != "message"}], "lacks key 'message'"),
    ([{**_gate(1, True), "extra": 1}], "unknown key 'extra'"),
])
def test_a_malformed_gates_file_means_the_same_to_every_reader(tmp_path, doc, says):
    run_dir = clean_run().write(tmp_path / "run")
    (run_dir / "gates.json").write_text(json.dumps(doc))
    with pytest.raises(run_files.RunFileError, match="gates.json"):
        run_files.read_gates(run_dir)
    with pytest.raises(ReportError, match="gates.json"):  # the report stops, naming it
        load_run(run_dir)


def test_the_latest_run_of_each_group():
    runs = [("a", 2, "r2"), ("a", 3, "r1"), ("b", 1, "r9"), ("a", 3, "r3")]
    best = run_files.latest(runs, lambda r: r[0], lambda r: (r[1], r[2]))
    assert best == {"a": ("a", 3, "r3"), "b": ("b", 1, "r9")}


def test_the_frontiers_latest_is_the_latest_accepted():
    def run(run_id: str, at: str, accepted: bool) -> LevelRun:
        return LevelRun(run_id, "c", "emulated", at, accepted, True, None)

    runs = [run("r1", "2026-12-01T00:00:00Z", True), run("r2", "2026-12-02T00:00:00Z", False)]
    assert [r.run_id for r in latest_accepted(runs)] == ["r1"]  # the newer one was rejected


def test_deployment_json_has_its_keys(tmp_path):
    deployment_record.write(tmp_path, {"endpoint": "http://127.0.0.1:1", "emulated": True})
    assert deployment_record.read(tmp_path)["emulated"] is True
    with pytest.raises(deployment_record.DeploymentRecordError, match="deployment.json.pidd"):
        deployment_record.write(tmp_path, {"endpoint": "e", "emulated": True, "pidd": 1})
    with pytest.raises(deployment_record.DeploymentRecordError, match="emulated: expected bool"):
        deployment_record.check({"endpoint": "e", "emulated": 1})


def _file_names(path: Path) -> list[tuple[int, str]]:
    """The run-folder file names a module spells in code (not in docstrings, nor in a
    message: a name with a space around it is prose)."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
            and " " not in n.value and any(_names(name, n.value) for name in READERS)]


def _names(name: str, text: str) -> bool:
    """`text` names the file `name` (not `scale_events.parquet` for `events.parquet`)."""
    return re.search(r"(?<![\w.])" + re.escape(name), text) is not None


def test_each_file_is_named_by_its_reader_alone():
    found = []
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            for line, text in _file_names(path):
                if not any(_names(name, text) and READERS[name] == rel for name in READERS):
                    found.append(f"{rel}:{line}: {text}")
    assert found == [], "a run-folder file read beside its reader"
    # the guard finds what it looks for
    assert {t for _, t in _file_names(ROOT / READERS["gates.json"])} >= {
        "gates.json", "episode.json", "events.parquet"}


OVERLAP = re.compile(r"greatest\(\s*0\s*,\s*least\(\s*coalesce\(")
SLO = re.compile(r"ttft_s\s*<=\s*[\w.$]*slo_ttft_s")


def test_the_interval_overlap_and_the_slo_rule_are_each_one_macro():
    texts = {p.stem: p.read_text() for p in sorted((ROOT / "sql").glob("*.sql"))}
    assert [n for n, t in texts.items() if OVERLAP.search(t) and n != "overlap_ns"] == []
    assert [n for n, t in texts.items() if SLO.search(t) and n != "slo_met"] == []
    assert OVERLAP.search(texts["overlap_ns"]) and SLO.search(texts["slo_met"])
    used = [n for n, t in texts.items() if "overlap_ns(" in t and n != "overlap_ns"]
    assert len(used) >= 6, used  # the timelines' integrals all count with it


@pytest.mark.parametrize("a0, a1, b0, b1, ns", [
    (0, 10, 5, 20, 5),       # overlaps the window's start
    (0, None, 5, 20, 15),    # still open: up to the window's end
    (30, 40, 5, 20, 0),      # after the window
    (6, 8, 5, 20, 2),        # inside
])
def test_overlap_ns(a0, a1, b0, b1, ns):
    con, scratch = connect()
    try:
        [(got,)] = con.execute("SELECT overlap_ns($a0::BIGINT, $a1::BIGINT, $b0, $b1)",
                               {"a0": a0, "a1": a1, "b0": b0, "b1": b1}).fetchall()
    finally:
        con.close()
    assert got == ns
    assert sqlfiles.load("overlap_ns").startswith("-- name: overlap_ns")
    with pytest.raises(duckdb.Error):  # a connection without it does not know it
        duckdb.connect().execute("SELECT overlap_ns(0, 1, 0, 1)")


def test_gate_keys_are_the_contracts():
    assert set(_gate(1, True)) == set(GATE_KEYS)
