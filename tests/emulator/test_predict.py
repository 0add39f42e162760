"""`servingbench predict`: the emulator's own model and scheduler in virtual time, over rows
of a published-measurements table (tests/fixtures/calibration: 21 published rows)."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest
from servingbench.emulator import predict as pr
from servingbench.emulator.rows import Row, note_hints, read_row

FIXTURE = Path(__file__).parents[1] / "fixtures" / "calibration" / "published_rows.csv"


def raw_rows() -> list[dict[str, str]]:
    with FIXTURE.open(newline="") as fh:
        return list(csv.DictReader(fh))


def predict_cli(tmp_path: Path, rows: list[dict[str, str]], columns: list[str] | None = None):
    src, out = tmp_path / "rows.csv", tmp_path / "pred.csv"
    columns = columns or list(rows[0])
    with src.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    proc = subprocess.run([sys.executable, "-m", "servingbench.pipelines.cli", "predict",
                           "--in", str(src), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    return proc, out


@pytest.fixture(scope="module")
def predictions() -> dict[str, pr.Prediction]:
    return {r.row_id: pr.simulate(r) for r in pr.read_rows(FIXTURE)}


def test_every_fixture_row_is_predicted_with_finite_positive_figures(predictions):
    kinds = {d["load_kind"] for d in raw_rows()}
    assert kinds == {"concurrency", "request_rate", "offline", "fixed_batch", "sweep_max"}
    for rid, p in predictions.items():
        assert p.status == "ok", (rid, p.status)
        for v in (p.output_tok_s, p.ttft_ms_median, p.tpot_ms_median, p.req_s):
            assert v is not None and math.isfinite(v) and v > 0, (rid, p)


def test_the_command_writes_one_row_per_input_row(tmp_path):
    rows = raw_rows()[:4]
    proc, out = predict_cli(tmp_path, rows)
    assert proc.returncode == 0, proc.stderr
    assert "EMULATED" in proc.stdout
    with out.open() as fh:
        got = list(csv.DictReader(fh))
    assert [r["row_id"] for r in got] == [r["row_id"] for r in rows]
    assert set(pr.OUT_COLUMNS) <= set(got[0])
    assert all(r["status"] == "ok" and float(r["pred_output_tok_s_total"]) > 0 for r in got)


def test_a_row_the_emulator_cannot_express_is_unsupported_not_a_crash(tmp_path):
    rows = raw_rows()[:2]
    rows[0] = {**rows[0], "model": "Falcon-180B"}
    rows[1] = {**rows[1], "accelerator": "TPU-v5e", "instance": ""}
    proc, out = predict_cli(tmp_path, rows)
    assert proc.returncode == 0, proc.stderr
    with out.open() as fh:
        got = {r["row_id"]: r for r in csv.DictReader(fh)}
    assert got[rows[0]["row_id"]]["status"] == "unsupported: unknown model 'Falcon-180B'"
    assert got[rows[1]["row_id"]]["status"].startswith("unsupported: unknown accelerator 'TPU-v5e'")
    assert got[rows[0]["row_id"]]["pred_output_tok_s_total"] == ""


@pytest.mark.parametrize(("column", "value", "says"), [
    ("n_accel", "eight", "column n_accel: 'eight' is not a number"),
    ("input_tokens", "-1000", "column input_tokens: '-1000' must be > 0"),
    ("load_value", "inf", "column load_value: 'inf' is not finite"),
    ("output_tokens", "nan", "column output_tokens: 'nan' is not finite"),
    ("tp", "2.5", "column tp: '2.5' is not a whole number"),
    ("load_kind", "burst", "column load_kind: 'burst' is not one of"),
    ("client", "grpc", "column client: 'grpc' is not one of in_process, http"),
])
def test_a_bad_value_exits_2_naming_the_row_and_column_and_writes_nothing(tmp_path, column, value, says):
    rows = raw_rows()[:3]
    rows[1] = {**rows[1], column: value}
    out = tmp_path / "pred.csv"
    out.write_text("an earlier prediction\n")
    proc, _ = predict_cli(tmp_path, rows, list(dict.fromkeys([*rows[0], column])))
    assert proc.returncode == 2
    assert f"row {rows[1]['row_id']}: {says}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert out.read_text() == "an earlier prediction\n"


def test_a_missing_column_exits_2_naming_it(tmp_path):
    rows = raw_rows()[:2]
    columns = [c for c in rows[0] if c != "output_tokens"]
    proc, _ = predict_cli(tmp_path, rows, columns)
    assert proc.returncode == 2
    assert "missing column output_tokens" in proc.stderr


def test_an_unreadable_file_exits_2_naming_it(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "servingbench.pipelines.cli", "predict",
                           "--in", str(tmp_path / "absent.csv"), "--out", str(tmp_path / "o.csv")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "absent.csv" in proc.stderr


def row(**over) -> Row:
    d = {"row_id": "x", "model": "Llama-3.1-8B", "total_params_b": "8", "active_params_b": "8",
         "weight_precision": "bf16", "kv_cache_precision": "", "engine": "vllm",
         "engine_version": "", "accelerator": "H100-SXM-80GB", "instance": "", "n_accel": "1",
         "tp": "1", "ep": "", "input_tokens": "1000", "output_tokens": "200",
         "load_kind": "concurrency", "load_value": "8", "speculative": ""}
    d.update({k: str(v) for k, v in over.items()})
    return read_row(d, 1)


def test_a_run_with_attention_data_parallelism_is_unsupported_never_predicted_as_tp():
    """SGLang's --enable-dp-attention (the command in the notes) batches and prefills each
    rank's own requests: the model has one scheduler per TP group, so the row says so."""
    d = {"engine": "sglang", "model": "DeepSeek-R1", "weight_precision": "fp8",
         "accelerator": "H200-SXM-141GB", "n_accel": 8, "tp": 8, "load_kind": "offline",
         "load_value": ""}
    dp = row(**d, notes="cmd: python3 -m sglang.launch_server --tp 8 --enable-dp-attention")
    plain = row(**d, notes="cmd: python3 -m sglang.launch_server --tp 8")
    assert dp.attention_dp and not plain.attention_dp
    assert pr.simulate(dp).status.startswith("unsupported: attention data parallelism")
    assert pr.simulate(plain).status == "ok"


def test_more_bandwidth_more_throughput_and_lower_latency():
    h100, h200 = pr.simulate(row()), pr.simulate(row(accelerator="H200-SXM-141GB"))
    assert h200.output_tok_s > h100.output_tok_s and h200.tpot_ms_median < h100.tpot_ms_median


def test_more_concurrency_more_throughput_longer_tpot():
    low, high = pr.simulate(row(load_value=2)), pr.simulate(row(load_value=64))
    assert high.output_tok_s > 3 * low.output_tok_s and high.tpot_ms_median > low.tpot_ms_median


def test_replicas_share_the_load():
    one = pr.simulate(row(load_value=16))
    two = pr.simulate(row(load_value=32, n_accel=2))  # two TP1 replicas, 16 requests each
    assert two.output_tok_s == pytest.approx(2 * one.output_tok_s, rel=0.02)


def test_offline_ttft_is_queueing_and_grows_with_the_requests_sent():
    few = pr.simulate(row(load_kind="offline", load_value="", num_requests=100))
    many = pr.simulate(row(load_kind="offline", load_value="", num_requests=2000))
    assert many.ttft_ms_median > 3 * few.ttft_ms_median


def test_predictions_are_deterministic():
    assert pr.simulate(row(load_kind="request_rate", load_value=4)) == \
        pr.simulate(row(load_kind="request_rate", load_value=4))


def test_workload_facts_the_notes_state():
    assert note_hints("vllm bench serve (random 2K input; 500 prompts, all sent at t=0)") == (500, None)
    assert note_hints("guidellm; compiled batch 32, seq 4096") == (None, 32)
    assert note_hints("LLMPerf, 50 requests, bs1, LNC=2") == (50, 1)
    assert note_hints("") == (None, None)


def test_a_harness_in_the_engines_process_pays_no_api_server():
    # trtllm-bench hands its requests to the executor in its own process; an HTTP client at
    # request rate inf sends the same requests through the API server, one after another
    offline = {"engine": "tensorrt-llm", "load_kind": "offline", "load_value": "",
               "input_tokens": 128, "output_tokens": 128, "num_requests": 3000}
    bench = row(**offline, notes="[claim] trtllm-bench throughput, synthetic fixed ISL/OSL")
    http = row(**offline, notes="vllm bench serve (random 128 input; all sent at t=0)")
    assert bench.client == "in_process" and http.client == ""
    assert row(**offline, client="http").client == "http"
    assert pr.plan(bench).in_process and not pr.plan(http).in_process
    fast, slow = pr.simulate(bench), pr.simulate(http)
    ramp_ms = 3000 * pr.scheduler_for(pr.plan(http)).model.frontend_s * 1e3
    assert ramp_ms > 1000  # the server's frontend is a fitted figure; the point needs one
    assert fast.output_tok_s > slow.output_tok_s
    assert slow.ttft_ms_mean - fast.ttft_ms_mean > 0.1 * ramp_ms


def test_trtllm_serve_pays_its_own_servers_time_on_tensorrt_llms_kernels():
    """TensorRT-LLM behind trtllm-serve (the notes say so) is TensorRT-LLM's executor and
    kernels behind another API server: every kernel figure is TensorRT-LLM's, the API
    server's time per request is trtllm-serve's own figure (vLLM's until a fit has it), and
    the calibration fits it apart from Triton's."""
    from types import SimpleNamespace

    from servingbench.emulator.calibrate import _figure_paths
    from servingbench.emulator.engines import efficiency_of

    online = {"engine": "tensorrt-llm", "load_kind": "offline", "load_value": "",
              "input_tokens": 215, "output_tokens": 192, "num_requests": 1000}
    serve = row(**online, notes="vllm bench serve; cmd: trtllm-serve openai/gpt-oss-20b")
    triton = row(**online, notes="Triton tensorrtllm_backend")
    assert (serve.server, triton.server) == ("trtllm-serve", "")
    p_serve, p_triton = pr.plan(serve).config.profile(), pr.plan(triton).config.profile()
    assert (p_serve.name, p_serve.kernels, p_serve.frontend) == (
        "trtllm-serve", "tensorrt-llm", "trtllm-serve")
    assert (p_triton.name, p_triton.frontend) == ("tensorrt-llm", "tensorrt-llm")
    cal = {"engines": {"tensorrt-llm": {"frontend_ms": 2.0, "step_overhead_ms": 1.5},
                       "trtllm-serve": {"frontend_ms": 30.0}}}
    acc = pr.plan(serve).config.instance.accelerator
    mine = efficiency_of(p_serve.kernels, acc, cal, frontend=p_serve.frontend)
    theirs = efficiency_of(p_triton.kernels, acc, cal, frontend=p_triton.frontend)
    assert (mine["frontend_ms"], theirs["frontend_ms"]) == (30.0, 2.0)
    assert mine["step_overhead_ms"] == theirs["step_overhead_ms"] == 1.5
    # a fit without trtllm-serve's rows charges it vLLM's time per request (a Python API
    # server of the same build), never Triton's
    assert p_serve.frontend_like == "vllm"
    unfitted = {"engines": {"tensorrt-llm": {"frontend_ms": 2.0}, "vllm": {"frontend_ms": 9.0}}}
    assert p_serve.figures(acc, unfitted)["frontend_ms"] == 9.0
    assert p_triton.figures(acc, unfitted)["frontend_ms"] == 2.0
    slow = pr.simulate(serve, cal=cal)
    fast = pr.simulate(triton, cal=cal)
    assert slow.ttft_ms_mean > fast.ttft_ms_mean + 0.3 * 1000 * 28.0 / 2

    def paths(r):
        return {p for p, *_ in _figure_paths(SimpleNamespace(row=r))}

    assert ("engines", "trtllm-serve", "frontend_ms") in paths(serve)
    assert ("engines", "tensorrt-llm", "frontend_ms") not in paths(serve)
    assert ("engines", "tensorrt-llm", "step_overhead_ms") in paths(serve)
    assert ("engines", "tensorrt-llm", "frontend_ms") in paths(triton)


def test_neuron_rows_count_cores_and_run_the_compiled_batch():
    d = {"row_id": "n", "model": "Llama-3.1-8B", "total_params_b": "8", "active_params_b": "8",
         "weight_precision": "bf16", "kv_cache_precision": "", "engine": "vllm-neuron",
         "engine_version": "optimum-neuron@213224e", "accelerator": "Inferentia2",
         "instance": "inf2.48xlarge", "n_accel": "12", "tp": "8", "ep": "", "input_tokens": "1500",
         "output_tokens": "250", "load_kind": "sweep_max", "load_value": "128", "speculative": "",
         "notes": "compiled batch 32"}
    r = read_row(d, 1)
    plan = pr.plan(r)
    assert plan.replicas == 3 and plan.config.tp == 4  # TP8 cores = 4 chips, 12 chips = 3 replicas
    assert plan.max_num_seqs == 32 and plan.config.profile().name == "optimum-neuron"
    assert [(n, load.value) for n, load in pr.loads(r, plan)] == [(3, 32)]


def test_sweep_keeps_what_the_server_admits_in_flight():
    r = row(load_kind="sweep_max", load_value=4096)
    plan = pr.plan(r)
    assert pr.loads(r, plan)[0][1].value == plan.max_num_seqs


def test_a_row_takes_the_compiled_batch_its_siblings_state(tmp_path):
    """A tutorial's EAGLE run names no batch; its baseline, same source and configuration,
    says max-num-seqs 1: the EAGLE run was compiled the same. Another source's row is not a
    sibling, and siblings that disagree leave the engine's default."""
    base = {"row_id": "a", "source": "tutorial", "model": "gpt-oss-120b", "total_params_b": "117",
            "active_params_b": "5.1", "weight_precision": "bf16", "kv_cache_precision": "",
            "engine": "vllm-neuron", "engine_version": "", "accelerator": "Trainium2",
            "instance": "trn2.48xlarge", "n_accel": "4", "tp": "16", "ep": "",
            "input_tokens": "512", "output_tokens": "128", "load_kind": "concurrency",
            "load_value": "1", "speculative": "", "notes": "max-num-seqs 1; baseline"}
    raws = [base, {**base, "row_id": "b", "speculative": "EAGLE3, k=1", "notes": "EAGLE3"},
            {**base, "row_id": "c", "source": "elsewhere", "notes": ""},
            {**base, "row_id": "d", "input_tokens": "1024", "notes": "batch 4"},
            {**base, "row_id": "e", "input_tokens": "1024", "notes": "batch 8"},
            {**base, "row_id": "f", "input_tokens": "1024", "notes": ""}]
    src = tmp_path / "rows.csv"
    with src.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(base))
        w.writeheader()
        w.writerows(raws)
    got = {r.row_id: r.max_num_seqs for r in pr.read_rows(src)}
    assert got == {"a": 1, "b": 1, "c": None, "d": 4, "e": 8, "f": None}


def test_speculative_depth_as_each_engine_counts_it():
    from servingbench.emulator.rows import speculative_of
    # SGLang: num-steps is the depth; its "draft tokens" count the step's own token too
    assert speculative_of("SGLang EAGLE/MTP (num-steps 1, topk 1, 2 draft tokens)") == (1, 0.7)
    assert speculative_of("EAGLE3 k=1 (acceptance 69%)") == (1, 0.69)
    assert speculative_of("3 draft tokens") == (3, 0.7)
    assert speculative_of("") is None


def test_the_held_out_table_is_read_and_each_of_its_configurations_served():
    # the held-out TensorRT-LLM cells (benchmarks/emulator_holdout.py) parse as a rows file;
    # one row per model, GPU and TP degree (its shortest shape) is predicted, none unsupported
    table = Path(__file__).parents[2] / "docs" / "calibration" / "holdout_trtllm_v017.csv"
    rows = pr.read_rows(table)
    assert len(rows) == 295 and all(r.client == "in_process" for r in rows)
    first = {}
    for r in rows:
        key = (r.model, r.accelerator, r.tp)
        if r.input_tokens + r.output_tokens <= 2176:
            first.setdefault(key, r)
    assert len(first) >= 30
    bad = [(k, p.status) for k, p in ((k, pr.simulate(r)) for k, r in first.items()) if p.status != "ok"]
    assert bad == []


def test_only_a_row_that_dequantizes_informs_its_tensor_cores_share():
    """The calibration fits the dequantizing share per tensor-core generation, from the rows
    whose weights the chip's matrix units do not run (MXFP4 before Blackwell), never from
    a row whose GEMMs run their own format."""
    from types import SimpleNamespace

    from servingbench.emulator.calibrate import _figure_paths

    def paths(**over):
        return {p for p, *_ in _figure_paths(SimpleNamespace(row=row(**over)))}

    oss = {"model": "gpt-oss-120b", "total_params_b": "117", "active_params_b": "5.1",
           "weight_precision": "mxfp4"}
    assert ("tensor_cores", "hopper", "dequant_compute") in paths(**oss)
    assert ("tensor_cores", "ampere", "dequant_compute") in paths(**oss, accelerator="A100-SXM4-80GB")
    assert not any(p[0] == "tensor_cores" for p in paths(**oss, accelerator="B200-SXM-180GB"))
    assert not any(p[0] == "tensor_cores" for p in paths())  # bf16 Llama on an H100
