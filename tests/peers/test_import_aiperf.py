"""`servingbench import aiperf` on what the installed AIPerf 0.13 wrote, run against the
emulator's fixed-timing server on 127.0.0.1; then `servingbench export --format aiperf` read
by AIPerf's own viewer code and imported back. Skips when `make peers` has not installed it.

AIPerf starts several processes and takes about a minute to run 10 requests on this machine,
so it runs once per module and the tests read copies of its folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from servingbench.pipelines.cli import main as cli
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.contract import manifest as mf

from tests.support import peers
from tests.support.emulator import FixedTimingServer

REQUESTS, WARMUP, OUTPUT = 6, 2, 8

# each module runs its peer once (a minute or more on a busy machine): slow, and given the
# time the peer's own run takes
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def aiperf_run(tmp_path_factory) -> tuple[Path, dict]:
    py = peers.require("aiperf")
    tmp = tmp_path_factory.mktemp("aiperf")
    server = FixedTimingServer(tmp, ttft_ms=20, itl_ms=5)
    try:
        tok = peers.tokenizer(py, tmp / "tokenizer")
        out = peers.run_aiperf(py, server.base_url, tmp / "artifacts", tok, concurrency=2,
                               requests=REQUESTS, warmup=WARMUP, output_tokens=OUTPUT)
        truth = server.truth()
    finally:
        server.stop()
    return out, truth


def ns_rows(path: Path) -> list[dict]:
    t = pq.read_table(path)
    return pa.table({f.name: (t[f.name].cast(pa.int64()) if pa.types.is_timestamp(f.type)
                              else t[f.name]) for f in t.schema}).to_pylist()


def records(folder: Path) -> dict[str, dict]:
    out = {}
    for line in (folder / "profile_export.jsonl").read_text().splitlines():
        rec = json.loads(line)
        out[rec["metadata"]["x_request_id"]] = rec
    return out


def test_aiperf_artifacts_become_a_run_folder_the_analyzer_accepts(aiperf_run, tmp_path) -> None:
    folder, truth = aiperf_run
    out = tmp_path / "run"
    assert cli(["import", "aiperf", str(folder), "--out", str(out)]) == 0
    m = mf.load(out / "manifest.json")
    assert m["source"] == "emulated" and m["model"] == "fixed"
    assert (m["import"]["peer"], m["import"]["peer_version"]) == ("aiperf", "0.13.0")
    assert m["import"]["chunk_times"] == "recorded"  # --export-level raw keeps them
    assert [s["step"] for s in m["steps"]] == ["c=2"]
    steady = ns_rows(out / "steady_state_request_log.parquet")
    warmup = ns_rows(out / "warmup_log.parquet")
    assert (len(steady), len(warmup)) == (REQUESTS, WARMUP)
    # every request AIPerf sent is one the server served: the X-Request-ID joins them
    assert {r["request_id"] for r in steady + warmup} <= set(truth)
    theirs = records(folder)
    for r in steady:
        rec = theirs[r["request_id"]]
        md = rec["metadata"]
        assert (r["sent_at"], r["finished_at"], r["scheduled_at"]) == (
            md["request_start_ns"], md["request_end_ns"], md["credit_issued_ns"])
        assert r["output_tokens"] == rec["metrics"]["usage_completion_tokens"]["value"] == OUTPUT
        assert r["output_tokens_source"] == "usage" and r["chunks"] == OUTPUT
        # AIPerf's TTFT is its first content chunk: the same instant, to the microsecond
        ttft_ms = rec["metrics"]["time_to_first_token"]["value"]
        assert abs((r["first_token_at"] - r["sent_at"]) / 1e6 - ttft_ms) < 1e-3
    result = analyze_run(out)
    assert result.exit_code == 0, result.message
    assert [g["passed"] for g in result.gates][:4] == [True, True, True, True]
    assert result.metrics.to_pylist()[0]["n_ok"] == REQUESTS


def test_without_raw_records_chunk_times_are_rebuilt_and_said_so(aiperf_run, tmp_path) -> None:
    folder, _ = aiperf_run
    src = tmp_path / "records-only"
    shutil.copytree(folder, src)
    (src / "profile_export_raw.jsonl").unlink()
    out = tmp_path / "run"
    assert cli(["import", "aiperf", str(src), "--out", str(out)]) == 0
    m = mf.load(out / "manifest.json")
    assert m["import"]["chunk_times"] == "reconstructed_from_itl"
    assert any("rebuilt from AIPerf's time_to_first_token" in n for n in m["import"]["notes"])
    steady = ns_rows(out / "steady_state_request_log.parquet")
    assert {r["output_tokens_source"] for r in steady} == {"itl"}
    theirs = records(src)
    chunks = ns_rows(out / "chunk_log.parquet")
    r = steady[0]
    ats = [c["at"] for c in chunks if c["request_id"] == r["request_id"]]
    gaps_ms = theirs[r["request_id"]]["metrics"]["inter_chunk_latency"]["value"]
    assert len(ats) == len(gaps_ms) + 1
    assert [round((b - a) / 1e6, 3) for a, b in zip(ats, ats[1:], strict=False)] == [round(g, 3) for g in gaps_ms]
    assert analyze_run(out).exit_code == 0


@pytest.mark.parametrize("damage, expect", [
    ("cut", "line"),
    ("version", "request_headers.User-Agent says aiperf/0.12.0"),
    ("field", ".metadata.request_start_ns: expected int"),
])
def test_damaged_or_mixed_artifacts_exit_2_naming_file_and_field(aiperf_run, tmp_path, capsys,
                                                                  damage, expect) -> None:
    folder, _ = aiperf_run
    src = tmp_path / "damaged"
    shutil.copytree(folder, src)
    if damage == "cut":
        target = src / "profile_export.jsonl"
        target.write_bytes(target.read_bytes()[:-200])
    elif damage == "version":
        target = src / "profile_export_raw.jsonl"
        lines = target.read_text().splitlines()
        rec = json.loads(lines[-1])
        rec["request_headers"]["User-Agent"] = "aiperf/0.12.0"
        target.write_text("\n".join(lines[:-1] + [json.dumps(rec)]) + "\n")
    else:
        target = src / "profile_export.jsonl"
        lines = target.read_text().splitlines()
        rec = json.loads(lines[0])
        rec["metadata"]["request_start_ns"] = "late"
        target.write_text("\n".join([json.dumps(rec)] + lines[1:]) + "\n")
    assert cli(["import", "aiperf", str(src), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert str(target) in err and expect in err, err


def test_export_is_read_by_aiperfs_viewer_and_imports_back(aiperf_run, tmp_path) -> None:
    folder, _ = aiperf_run
    py = peers.require("aiperf")
    run = tmp_path / "run"
    assert cli(["import", "aiperf", str(folder), "--out", str(run)]) == 0
    exported = tmp_path / "exported"
    assert cli(["export", str(run), "--format", "aiperf", "--out", str(exported)]) == 0
    step_dir = exported / "c=2"
    # AIPerf's own reader (what `aiperf plot` draws from) loads the exported folder; then
    # `aiperf plot`, AIPerf's viewer, draws it, in the same interpreter (the command its
    # console script runs: one start of AIPerf's imports, not two): PNGs where a browser
    # renders them (kaleido drives Chrome; `make chromium` installs Debian's), else it loads
    # the data and says why it drew nothing
    probe = ("import sys, json; from pathlib import Path\n"
             "from aiperf.plot.core.data_loader import DataLoader\n"
             "d = DataLoader().load_run(Path(sys.argv[1]))\n"
             "ok = d.requests[d.requests['benchmark_phase'] == 'profiling']\n"
             "print('LOADED ' + json.dumps({'n': len(ok), 'concurrency': d.metadata.concurrency,\n"
             "  'ttft': sorted(ok['time_to_first_token'].tolist())}), flush=True)\n"
             "from aiperf.cli import app\n"
             "sys.exit(app(['plot', sys.argv[1], '--output', sys.argv[2]]))\n")
    plots = tmp_path / "plots"
    browser = shutil.which("chromium")
    # its first run writes a plot config under $HOME: a home of the test's own
    env = {**os.environ, "HOME": str(tmp_path), **({"BROWSER_PATH": browser} if browser else {})}
    # the viewer's browser driver (kaleido over choreographer) now and then never returns
    # from closing Chrome after drawing the first chart; a second run in a fresh process is
    # what its user would do, so one hang is retried and two fail the test
    for attempt in (1, 2):
        try:
            p = subprocess.run([str(py), "-c", probe, str(step_dir), str(plots)],
                               capture_output=True, text=True, timeout=240, env=env)
            break
        except subprocess.TimeoutExpired as exc:
            log = plots / "aiperf_plot.log"
            tail = log.read_text()[-1500:] if log.exists() else ""
            assert attempt == 1, f"`aiperf plot` hung twice; its log ends:\n{tail}"
            assert "Closing browser" in tail, f"`aiperf plot` hung before drawing: {exc}\n{tail}"
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    (loaded,) = [ln for ln in p.stdout.splitlines() if ln.startswith("LOADED ")]
    seen = json.loads(loaded.removeprefix("LOADED "))
    steady = ns_rows(run / "steady_state_request_log.parquet")
    assert seen["n"] == REQUESTS and seen["concurrency"] == 2
    assert seen["ttft"] == pytest.approx(sorted((r["first_token_at"] - r["sent_at"]) / 1e6
                                                for r in steady))
    assert (plots / "summary.txt").exists()
    if browser:
        assert list(plots.glob("*.png")), (plots / "summary.txt").read_text()
    # and servingbench reads its own export back to the same requests
    back = tmp_path / "back"
    assert cli(["import", "aiperf", str(step_dir), "--out", str(back)]) == 0
    again = {r["request_id"]: r for r in ns_rows(back / "steady_state_request_log.parquet")}
    for r in steady:
        for key in ("sent_at", "finished_at", "output_tokens"):
            assert again[r["request_id"]][key] == r[key], key
        # chunk times come back through AIPerf's milliseconds (floats): within a microsecond
        for key in ("first_token_at", "last_token_at"):
            assert abs(again[r["request_id"]][key] - r[key]) <= 1000, key
    notes = mf.load(back / "manifest.json")["import"]["notes"]
    assert any("not an AIPerf measurement" in n for n in notes)


def test_csv_export_has_a_row_per_request(aiperf_run, tmp_path) -> None:
    folder, _ = aiperf_run
    run = tmp_path / "run"
    assert cli(["import", "aiperf", str(folder), "--out", str(run)]) == 0
    out = tmp_path / "requests.csv"
    assert cli(["export", str(run), "--format", "csv", "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 1 + REQUESTS + WARMUP
    head = lines[0].split(",")
    assert head[:3] == ["source", "run_id", "request_id"] and head[-4:] == [
        "ttft_s", "e2e_s", "tpot_s", "itl_s_mean"]
    assert cli(["export", str(run), "--format", "csv", "--out", str(out)]) == 2
