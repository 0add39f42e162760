"""contract §2 and §6: the reader rejects malformed input with a message naming file, column and
expected type (exit 2), reads a run cut off mid-write, and the SQL files follow the house rules."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
from servingbench.pipelines.cli import main as cli
from servingbench.resources.analysis import sqlfiles
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.schemas import (
    CHUNK_LOG,
    OPTIONAL_CHUNK_COLUMNS,
    REQUEST_LOG,
    read_records,
)

from tests.support.runbuilder import clean_run


def _rewrite(path, fn):
    table = pq.read_table(path)
    pq.write_table(fn(table), path)


@pytest.mark.parametrize("edit, expected", [
    (lambda t: t.drop_columns(["first_token_at"]),
     "steady_state_request_log.parquet: missing column 'first_token_at', expected type timestamp[ns, tz=UTC]"),
    (lambda t: t.rename_columns(["frist_token_at" if n == "first_token_at" else n for n in t.column_names]),
     "missing column 'first_token_at', expected type timestamp[ns, tz=UTC] (found unexpected 'frist_token_at': misspelt?)"),
    (lambda t: t.set_column(t.schema.get_field_index("output_tokens"), "output_tokens",
                            t["output_tokens"].cast(pa.float64())),
     "column 'output_tokens' has type double, expected int64"),
    (lambda t: t.set_column(t.schema.get_field_index("sent_at"), "sent_at",
                            t["sent_at"].cast(pa.timestamp("us", tz="UTC"))),
     "column 'sent_at' has type timestamp[us, tz=UTC], expected timestamp[ns, tz=UTC]"),
    (lambda t: t.append_column("colour", pa.array(["red"] * len(t))),
     "unexpected column 'colour'"),
])
def test_malformed_request_log_exits_2_naming_file_column_and_type(tmp_path, capsys, edit, expected):
    run_dir = clean_run().write(tmp_path / "run")
    _rewrite(run_dir / "steady_state_request_log.parquet", edit)
    assert cli(["analyze", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert expected in err
    assert not (run_dir / "gates.json").exists()


def test_nullability_flags_are_not_checked(tmp_path):
    run_dir = clean_run().write(tmp_path / "run")
    # the optional `kind` (all null here) is left out: an absent optional column is allowed
    strict = pa.schema([f.with_nullable(False) for f in CHUNK_LOG
                        if f.name not in OPTIONAL_CHUNK_COLUMNS])
    _rewrite(run_dir / "chunk_log.parquet", lambda t: t.select(strict.names).cast(strict))
    assert analyze_run(run_dir).exit_code == 0


@pytest.mark.parametrize("edit, expected", [
    (lambda m: m.update(colour="red"), "unknown key 'colour'"),
    (lambda m: m.pop("node_count"), "missing key 'node_count'"),
    (lambda m: m.update(node_count="one"), "manifest.node_count: expected integer"),
    (lambda m: m.update(source="estimated"), "manifest.source: 'estimated' is not one of"),
    (lambda m: m.update(run_id="no spaces allowed"), "manifest.run_id"),
    (lambda m: m["phases"]["steady"].update(started_at="yesterday"), "phases.steady.started_at"),
    (lambda m: m["steps"][0].update(clientlimited=True), "steps[0]: unknown key 'clientlimited'"),
    (lambda m: m.update(workers=[{"name": "pod-1", "status": "gone", "reason": None}]),
     "manifest.workers[0].status"),
    (lambda m: m.update(workers=[{"name": "pod-1", "status": "ok"}]),
     "workers[0]: missing key 'reason'"),
])
def test_malformed_manifest_exits_2_naming_the_key(tmp_path, capsys, edit, expected):
    run_dir = clean_run().write(tmp_path / "run")
    m = json.loads((run_dir / "manifest.json").read_text())
    edit(m)
    (run_dir / "manifest.json").write_text(json.dumps(m))
    assert cli(["analyze", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "manifest.json" in err and expected in err


def test_workers_are_optional_and_checked_when_present(tmp_path):
    run_dir = clean_run().write(tmp_path / "run")
    m = json.loads((run_dir / "manifest.json").read_text())
    assert "workers" not in m and mf.validate(m)
    m["workers"] = [{"name": "pod-0", "status": "ok", "reason": None},
                    {"name": "pod-1", "status": "failed", "reason": "container load exited 137"}]
    assert mf.validate(m)["workers"][1]["status"] == "failed"


def test_not_json_and_missing_files_exit_2(tmp_path, capsys):
    run_dir = clean_run().write(tmp_path / "run")
    (run_dir / "chunk_log.parquet").unlink()
    assert cli(["analyze", str(run_dir)]) == 2
    assert "chunk_log.parquet: missing" in capsys.readouterr().err
    (run_dir / "manifest.json").write_text("{not json")
    assert cli(["analyze", str(run_dir)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    (run_dir / "steady_state_request_log.parquet").write_bytes(b"PAR1 garbage")
    assert cli(["analyze", str(tmp_path / "absent")]) == 2


def test_the_example_manifest_of_the_spec_is_valid_and_round_trips(tmp_path):
    from pathlib import Path
    example = Path(__file__).resolve().parents[3] / "shared" / "examples" / "manifest.example.json"
    if not example.exists():
        pytest.skip("shared/ is not beside this checkout")
    m = mf.load(example)
    mf.dump(m, tmp_path / "m.json")
    assert mf.load(tmp_path / "m.json") == m


def test_timestamps_keep_every_nanosecond():
    ns = mf.parse_ts("2026-11-29T02:00:00.123456789Z")
    assert ns % 1_000_000_000 == 123456789
    assert mf.format_ts(ns) == "2026-11-29T02:00:00.123456789Z"
    assert mf.parse_ts("2026-11-29T03:00:00.5+01:00") == mf.parse_ts("2026-11-29T02:00:00.500000000Z")


def test_a_run_killed_mid_write_is_read_from_its_partial_stream(tmp_path):
    # A load generator killed by SIGKILL leaves `<name>.partial.arrows` with a torn last batch.
    run_dir = clean_run().write(tmp_path / "run")
    table = pq.read_table(run_dir / "steady_state_request_log.parquet")
    (run_dir / "steady_state_request_log.parquet").unlink()
    partial = run_dir / "steady_state_request_log.partial.arrows"
    with pa.OSFile(str(partial), "wb") as sink, ipc.new_stream(sink, REQUEST_LOG) as writer:
        for batch in table.to_batches(max_chunksize=1):
            writer.write_batch(batch)
    data = partial.read_bytes()
    partial.write_bytes(data[:-40])  # tear the end-of-stream marker and part of the last batch
    assert len(read_records(run_dir, "steady_state_request_log")) == len(table) - 1
    result = analyze_run(run_dir)
    assert result.partial == ["steady_state_request_log"]
    assert result.metrics.to_pylist()[0]["n_requests"] == len(table) - 1


def test_sql_files_are_named_documented_and_bind_values_only():
    files = sorted((f for f in sqlfiles.SQL_DIR.iterdir() if f.name.endswith(".sql")),
                   key=lambda f: f.name)
    names = [f.name.removesuffix(".sql") for f in files]
    assert set(names) >= {"step_metrics", "cost_per_1m", "headline", "request_facts",
                          "phase_facts", "bill_facts", "bill_usage", "instance_periods"}
    for f, name in zip(files, names, strict=True):
        text = f.read_text()
        assert text.startswith(f"-- name: {name}\n"), f
        header = "\n".join(line for line in text.splitlines() if line.startswith("--"))
        for param in sqlfiles.params_of(name):
            assert f"${param}" in header, f"{f.name}: ${param} not documented in its header"
        assert not re.search(r"\{[a-z_]*\}", text), f"{f.name}: looks like a format template"


def test_cli_subprocess_prints_emulated_summary_and_exit_code(tmp_path):
    run_dir = clean_run().write(tmp_path / "run")
    proc = subprocess.run([sys.executable, "-m", "servingbench.pipelines.cli", "analyze", str(run_dir)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "EMULATED" in proc.stdout and "ACCEPTED" in proc.stdout
    assert "Traceback" not in proc.stderr
    bad = subprocess.run([sys.executable, "-m", "servingbench.pipelines.cli", "analyze", str(tmp_path / "x")],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "not a run folder" in bad.stderr and "Traceback" not in bad.stderr
