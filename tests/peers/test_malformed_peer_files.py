"""Every malformed peer file is `servingbench import` exit 2 with a message naming the file
and the key, never a traceback: wrong types deep in a record, numbers no clock can hold,
nesting that would exhaust the stack, YAML aliases that expand a small file into a huge
one, and files or record counts past the caps. The readers' inputs here are made by hand,
each the smallest a reader gets through to the defect."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from servingbench.pipelines.cli import main as cli
from servingbench.resources.peers import records, run_writer

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "peers" / "vllm_bench_serve_0.33.0.json"
T0 = 1_764_000_000.0


def vllm(tmp: Path, change) -> Path:
    doc = json.loads(FIXTURE.read_text())
    text = change(doc)
    path = tmp / "result.json"
    path.write_text(text if isinstance(text, str) else json.dumps(doc))
    return path


def _set(doc, key, i, value):
    doc[key][i] = value


def _raw(doc, old: str, new: str) -> str:
    text = json.dumps(doc)
    assert old in text
    return text.replace(old, new, 1)


VLLM = {
    "Infinity start": (lambda d: _raw(d, '"start_times": [1000.0', '"start_times": [Infinity'),
                       "start_times"),
    "1e308 start": (lambda d: _set(d, "start_times", 0, 1e308), "start_times"),
    "1e308 itl": (lambda d: _set(d, "itls", 0, [1e308]), "itls"),
    "1e400 latency": (lambda d: _raw(d, '"latencies": [0.035', '"latencies": [1e400'),
                      "latencies"),
    "deep nesting": (lambda d: "[" * 100_000, "nested"),
    "a 100,000-character date, echoed short": (lambda d: d.update(date="9" * 100_000),
                                               "result.date"),
}


def run_import(peer: str, path: Path, tmp: Path, capsys, *extra: str) -> str:
    code = cli(["import", peer, str(path), "--out", str(tmp / "run"), *extra])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and str(path.name) in err, err
    assert len(err) < 2000, err  # echoed values are shortened
    return err


@pytest.mark.parametrize("case", list(VLLM))
def test_a_malformed_vllm_result_is_exit_2_naming_file_and_key(tmp_path, capsys, case):
    change, key = VLLM[case]
    path = vllm(tmp_path, change)
    err = run_import("vllm", path, tmp_path, capsys)
    if key:
        assert key in err, err


def test_a_vllm_error_of_blank_text_is_a_failed_request_not_a_crash(tmp_path, capsys):
    # vLLM writes "" for a success; any other text is a failure, here one with no words
    path = vllm(tmp_path, lambda d: _set(d, "errors", 0, " \n "))
    code = cli(["import", "vllm", str(path), "--out", str(tmp_path / "run")])
    assert code == 0, capsys.readouterr().err
    rows = pq.read_table(tmp_path / "run" / "steady_state_request_log.parquet").to_pylist()
    first = next(r for r in rows if r["request_id"] == "vllm-0")
    assert (first["status"], first["error"]) == ("http_error", "vllm recorded an error without text")


def guidellm_doc(*, timings=None, metrics=None) -> dict:
    timings = {"targeted_start": T0, "request_start": T0, "first_token_iteration": T0 + 0.1,
               "last_token_iteration": T0 + 0.2, "request_end": T0 + 0.3, "resolve_end": None,
               "token_iterations": 4, **(timings or {})}
    req = {"request_id": "r1", "info": {"timings": timings},
           "input_metrics": {"total_tokens": 5}, "output_metrics": {"total_tokens": None}}
    bench = {"config": {"strategy": {"type_": "synchronous"}, "backend": {"model": "m"}},
             "requests": {"successful": [req], "errored": [], "incomplete": []}}
    if metrics is not None:
        bench["metrics"] = metrics
    return {"metadata": {"version": 2, "guidellm_version": "0.8.1"}, "benchmarks": [bench]}


def test_a_wellformed_guidellm_minimum_imports(tmp_path, capsys):
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(guidellm_doc()))
    assert cli(["import", "guidellm", str(path), "--out", str(tmp_path / "run")]) == 0, \
        capsys.readouterr().err


@pytest.mark.parametrize(("doc", "key"), [
    (guidellm_doc(timings={"token_iterations": "x"}), "token_iterations"),
    (guidellm_doc(metrics=[1]), "metrics"),
    (guidellm_doc(metrics={"time_to_first_token_ms": [1]}), "time_to_first_token_ms"),
    (guidellm_doc(timings={"request_start": 1e308}), "request_start"),
])
def test_a_malformed_guidellm_report_is_exit_2_naming_file_and_key(tmp_path, capsys, doc, key):
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    assert key in run_import("guidellm", path, tmp_path, capsys)


def inference_perf(tmp: Path, entry: dict, config: str | None = None) -> Path:
    folder = tmp / "ip"
    folder.mkdir()
    (folder / "config.yaml").write_text(config or "load: {type: constant, stages: [{rate: 1}]}\n")
    (folder / "inference-perf.partial.stage_0.yaml").write_text(
        "version: 0.2.1\nrun: {time: {start: '2026-01-01T00:00:00.000Z'}}\n")
    (folder / "per_request_lifecycle_metrics.json").write_text(json.dumps([entry]))
    return folder


GOOD_IP = {"start_time": 10.0, "end_time": 10.5,
           "info": {"response_metrics": {"chunk_times": [10.1, 10.2], "output_tokens": 2,
                                         "server_usage": {"prompt_tokens": 5,
                                                          "completion_tokens": 2}}}}


def test_a_wellformed_inference_perf_minimum_imports(tmp_path, capsys):
    folder = inference_perf(tmp_path, GOOD_IP)
    assert cli(["import", "inference-perf", str(folder), "--out", str(tmp_path / "run")]) == 0, \
        capsys.readouterr().err


@pytest.mark.parametrize(("entry", "key"), [
    ({**GOOD_IP, "info": {"response_metrics": [1]}}, "response_metrics"),
    ({**GOOD_IP, "info": {"response_metrics": {**GOOD_IP["info"]["response_metrics"],
                                               "server_usage": {"prompt_tokens": "x"}}}},
     "prompt_tokens"),
    ({**GOOD_IP, "info": [1]}, "info"),
    ({**GOOD_IP, "error": [1, 2]}, None),
])
def test_a_malformed_inference_perf_report_is_exit_2_naming_file_and_key(tmp_path, capsys,
                                                                          entry, key):
    folder = inference_perf(tmp_path, entry)
    code = cli(["import", "inference-perf", str(folder), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    if key is None:  # an odd error value is kept as the request's error text
        assert code == 0, err
        return
    assert code == 2 and "Traceback" not in err and key in err, err
    assert "per_request_lifecycle_metrics.json" in err, err


def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path, capsys):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    bomb = "\n".join(lines) + "\nload: {type: constant, stages: [{rate: 1}]}\n"
    folder = inference_perf(tmp_path, GOOD_IP, config=bomb)
    started = time.monotonic()
    code = cli(["import", "inference-perf", str(folder), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "config.yaml" in err and "alias" in err, err
    assert time.monotonic() - started < 60  # 10^9 elements were it expanded: it never ends


def test_a_peer_file_past_the_byte_cap_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(records, "MAX_FILE_BYTES", 1024)
    path = vllm(tmp_path, lambda d: None)
    assert path.stat().st_size > 1024
    assert "larger than 1024 bytes" in run_import("vllm", path, tmp_path, capsys)


def test_a_peer_file_past_the_record_cap_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(records, "MAX_RECORDS", 3)
    path = vllm(tmp_path, lambda d: None)  # 4 requests
    assert "more than 3 records" in run_import("vllm", path, tmp_path, capsys)


def test_duplicate_ids_are_found_in_linear_time():
    class Counted(str):
        compared = 0

        def __eq__(self, other):
            Counted.compared += 1
            return str.__eq__(self, other)

        __hash__ = str.__hash__

    n = 2000
    reqs = [records.PeerRequest(step="s", load_mode="rate", target=1.0,
                                request_id=Counted(f"id-{i}")) for i in range(n)]
    reqs.append(records.PeerRequest(step="s", load_mode="rate", target=1.0,
                                    request_id=Counted(f"id-{n - 1}")))
    run = records.PeerRun(peer="vllm", peer_version=None, files=[Path("f.json")], requests=reqs,
                          chunk_times="recorded", output_tokens="usage")
    with pytest.raises(records.PeerFileError, match="id-1999"):
        run_writer._check(run)
    assert Counted.compared < 10 * n  # `ids.count` compared n^2 / 2 times
