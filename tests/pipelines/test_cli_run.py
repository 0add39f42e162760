"""`servingbench run --candidate NAME` on the local profile: one partition, the candidate's
own load plan, the EMULATED banner and headline."""

from __future__ import annotations

from pathlib import Path

import pytest
from servingbench.pipelines.cli import main as cli

pytestmark = pytest.mark.slow  # a chain, a job or processes: not in `make check`

REPO = Path(__file__).resolve().parents[2]


def test_run_one_candidate_on_the_local_profile(tmp_path, monkeypatch, capsys):
    cands = tmp_path / "c.yaml"
    cands.write_text(
        "candidates:\n  - {name: g6e-quick, instance_type: g6e.48xlarge, "
        "model: meta-llama/Llama-4-Scout-17B-16E-Instruct, precision: bf16, tensor_parallel: 8, "
        "scenario: {input_tokens: 64, output_tokens: 8, dataset: null}, "
        "load: {concurrency: [1], requests_per_step: 4, warmup_requests: 1}, "
        f"price: {{sheet: {REPO / 'pipelines' / 'price_sheet.yaml'}}}}}\n")
    for k, v in {"DAGSTER_HOME": tmp_path / "home", "SERVINGBENCH_DATA_DIR": tmp_path / "data",
                 "SERVINGBENCH_CANDIDATES": cands, "SERVINGBENCH_EMULATOR_TIME_SCALE": "0.2",
                 "SERVINGBENCH_EMULATOR_COLD_START_S": "0.2"}.items():
        monkeypatch.setenv(k, str(v))
    monkeypatch.delenv("SERVINGBENCH_PROFILE", raising=False)
    assert cli(["run", "--candidate", "g6e-quick", "--date", "2026-11-29"]) == 0
    out = capsys.readouterr().out
    assert "EMULATED" in out and "g6e-quick" in out and "g6e.48xlarge" in out
    assert len(list((tmp_path / "data" / "runs").iterdir())) == 1
    assert cli(["run", "--candidate", "nope"]) == 2
    assert "unknown candidate 'nope'" in capsys.readouterr().err


def test_run_all_names_why_its_code_server_did_not_start(tmp_path, monkeypatch, capsys):
    """`run --all` serves the definitions from one code server of its own: when it cannot
    start, the command fails with the server's own words, and leaves no process or folder."""
    from servingbench.pipelines.catalog import load_candidates
    from servingbench.pipelines.cli import run_all

    from tests.support.fleet import candidates_file, dagster_children, watch_folders

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    folders = watch_folders(monkeypatch)
    monkeypatch.setattr(run_all, "MODULE", "servingbench.no_such_module")
    cands = {c.name: c for c in load_candidates(candidates_file(tmp_path, {"a": "p5.48xlarge"}))}
    assert run_all.run_all(cands, "2026-11-29", 1, tmp_path) == 1
    err = capsys.readouterr().err
    assert "the code server exited during start" in err and "no_such_module" in err, err
    assert dagster_children() == []
    assert len(folders) == 1 and not folders[0].exists(), folders


def test_run_all_stops_when_its_code_server_dies(tmp_path, monkeypatch, capsys):
    """A code server that dies once started (an OOM kill) ends `run --all` with exit 1 naming
    it, instead of queueing runs that nothing can launch; the daemon and folder go too."""
    import signal

    from servingbench.pipelines.catalog import load_candidates
    from servingbench.pipelines.cli import run_all

    from tests.support.fleet import candidates_file, dagster_children, watch_folders

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    folders = watch_folders(monkeypatch)
    start = run_all._code_server

    def killed(folder):
        server, workspace = start(folder)
        server.proc.send_signal(signal.SIGKILL)  # its guard: run_all's stop ends the rest of the group
        server.proc.wait()
        return server, workspace
    monkeypatch.setattr(run_all, "_code_server", killed)
    cands = {c.name: c for c in load_candidates(candidates_file(tmp_path, {"a": "p5.48xlarge"}))}
    assert run_all.run_all(cands, "2026-11-29", 1, tmp_path) == 1
    err = capsys.readouterr().err
    assert "the code server stopped (exit -9)" in err, err
    assert dagster_children() == []
    assert len(folders) == 1 and not folders[0].exists(), folders
