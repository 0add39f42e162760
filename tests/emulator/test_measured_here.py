"""Rows of our own in the calibration table: measured on a lent H200 with transformers'
continuous-batching engine, every figure derived from the request records kept beside the
table; the emulator's profile of that engine (attention over the packed batch under a mask,
kernels launched eagerly from Python) predicts them; and the targets stay held against
published measurements, the measured rows reported apart. The measuring script itself runs
here on the CPU, in the vLLM CPU build's environment (it carries torch and transformers)."""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
from servingbench.emulator import calibrate as C
from servingbench.emulator import crossval as X
from servingbench.emulator import specs
from servingbench.emulator.engines import calibration, efficiency_of
from servingbench.emulator.perf import PerfModel
from servingbench.emulator.rows import read_row
from servingbench.resources.model_server.local import vllm_cpu

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "docs" / "calibration" / "published_serving.csv"
HERE = REPO / "docs" / "calibration" / "measured_here"
SCRIPT = REPO / "benchmarks" / "emulator_calibrate_serve.py"


def _serve_module():
    spec = importlib.util.spec_from_file_location("emulator_calibrate_serve", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _table_rows(kind: str) -> list[dict[str, str]]:
    with open(TABLE, newline="") as fh:
        return [d for d in csv.DictReader(fh) if d["claim_kind"] == kind]


def test_the_tables_measured_rows_are_exactly_what_the_kept_records_give():
    derived = _serve_module().table_rows(HERE / "h200_transformers_raw.jsonl.gz",
                                         HERE / "h200_transformers_runs.jsonl")
    assert derived, "no rows derived from the records"
    assert _table_rows("measured_here") == derived


def test_every_measured_row_names_its_records_and_is_predicted():
    rows = _table_rows("measured_here")
    assert {r["engine"] for r in rows} == {"transformers"}
    for d in rows:
        assert "measured_here/h200_transformers_raw.jsonl.gz" in d["source"]
        row = read_row(d, 0)
        assert specs.model_key(row.model), row.model
    samples = [s for s in C.load_table(TABLE) if s.claim_kind == "measured_here"]
    preds = C.predict_samples(samples, calibration())
    assert all(p is not None for p in preds)


def test_the_rows_measured_here_pass_no_api_server():
    """The harness drives the engine's manager in its own process: no API server's time per
    request stands before it, and no such figure is fitted to these rows."""
    samples = [s for s in C.load_table(TABLE) if s.claim_kind == "measured_here"]
    assert samples and all(C.pr.plan(s.row).in_process for s in samples)
    paths = {f.path for f in C.figures_for(samples)}
    assert ("engines", "transformers", "layer_overhead_us") in paths
    assert not any(p[2] == "frontend_ms" for p in paths)


def _model(engine: str, figures: dict[str, float]) -> PerfModel:
    cfg = specs.config("p5en.48xlarge", "llama-3.1-8b", "bf16", tp=1, engine=engine)
    m = PerfModel(cfg)
    eff = efficiency_of(cfg.profile().kernels, cfg.instance.accelerator, {})
    m.set_efficiency({**eff, **figures})
    return m


def test_a_masked_batch_attention_pairs_every_query_with_every_key_of_the_batch():
    quiet = {"step_overhead_ms": 0.0, "layer_overhead_us": 0.0, "seq_layer_overhead_us": 0.0,
             "seq_overhead_us": 0.0, "moe_layer_overhead_us": 0.0, "masked_attention": 0.5}
    masked, paged = _model("transformers", quiet), _model("vllm", quiet)
    # eight 1,024-token prompts beside 56 decoding sequences of 1,100 tokens
    n_tok, keys_read = 8 * 1024 + 56, 56 * 1100.0
    pairs_dec, pairs_pre = 56 * 1100.0, 8 * 1024 * 1025 / 2
    t_masked = masked.time(n_tok, 64, 56, keys_read, pairs_dec, pairs_pre, 0)
    t_paged = paged.time(n_tok, 64, 56, keys_read, pairs_dec, pairs_pre, 0)
    keys = keys_read + n_tok
    attention = n_tok * keys * masked.pair_flops_prefill / (masked.peak * 0.5)
    assert t_masked - attention == pytest.approx(t_paged - min(
        t_paged, max(keys_read * paged.kv_group_bytes / paged.mem_bw,
                     (pairs_dec * paged.pair_flops_decode + pairs_pre * paged.pair_flops_prefill)
                     / paged.peak)), rel=1e-6)
    assert t_masked > 5 * t_paged


def test_an_eager_step_takes_the_longer_of_its_kernels_and_its_launches():
    launches = {"step_overhead_ms": 1.0, "layer_overhead_us": 800.0, "seq_layer_overhead_us": 10.0,
                "seq_overhead_us": 0.0, "moe_layer_overhead_us": 0.0, "masked_attention": 1.0}
    m = _model("transformers", launches)
    no_launch = _model("transformers", {**launches, "layer_overhead_us": 0.0,
                                        "seq_layer_overhead_us": 0.0})
    # one decoding sequence: the kernels take a few ms, the 32 layers' launches 26 ms
    kernels = no_launch.time(1, 1, 1, 1000.0, 1000.0, 0.0, 0) - 1e-3
    assert kernels < 32 * 810e-6
    assert m.time(1, 1, 1, 1000.0, 1000.0, 0.0, 0) == pytest.approx(1e-3 + 32 * 810e-6)
    # an 8,192-token prefill: the launches hide under its kernels
    big = no_launch.time(8192, 8, 0, 0.0, 0.0, 8 * 1024 * 1025 / 2, 8)
    assert big - 1e-3 > 32 * 800e-6
    assert m.time(8192, 8, 0, 0.0, 0.0, 8 * 1024 * 1025 / 2, 8) == pytest.approx(big)


def test_the_targets_and_the_accelerator_bands_hold_only_published_rows():
    h200 = [s for s in C.load_table(TABLE) if s.accelerator == "H200-SXM-141GB"]
    mine = [s for s in h200 if s.claim_kind == "measured_here"]
    assert mine, "the table's H200 rows should include rows measured here"
    samples = [s for s in h200 if s.claim_kind != "measured_here"][:30] + mine
    preds = [{"tok_s": s.published.get("tok_s", 1.0) * 2, "ttft_ms": 1.0, "tpot_ms": 1.0}
             for s in samples]
    errs = X.errors(samples, preds)
    published = [s for s in samples if s.claim_kind != "measured_here" and "tok_s" in s.published]
    assert len(errs[("tok_s", "all")]) == len(published)
    assert len(errs[("tok_s", "accelerator:H200-SXM-141GB")]) == len(published)
    assert len(errs[("tok_s", "measured_here")]) == len(mine)
    assert len(errs[("tok_s", "engine:transformers")]) == len(mine)
    bands = X.band_table(errs)
    assert bands["overall"]["measured_here"]["tok_s"]["rows"] == len(mine)
    assert X.ordering(mine, [{"tok_s": 1.0}] * len(mine)) == {"accelerator": (0, 0), "curve": (0, 0)}


@pytest.mark.skipif(vllm_cpu.engine_available() is not None,
                    reason=str(vllm_cpu.engine_available()))
def test_the_measuring_script_keeps_every_requests_token_times(tmp_path):
    """The device run's code path on this CPU: a 2-layer model, two levels."""
    out = tmp_path / "out"
    proc = subprocess.run(
        [str(vllm_cpu.python()), str(SCRIPT), "--out", str(out), "--model", "tiny", "--device", "cpu",
         "--levels", "1,3", "--input-tokens", "48", "--output-tokens", "6", "--per-level", "4",
         "--num-blocks", "32", "--deadline-s", "120"],
        capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    raw = [json.loads(line) for line in (out / "serve_raw.jsonl").read_text().splitlines()]
    runs = [json.loads(line) for line in (out / "serve_rows.jsonl").read_text().splitlines()]
    assert [r["concurrency"] for r in runs] == [1, 3]
    assert len(raw) == 4 + 6
    for rec in raw:
        assert rec["error"] is None and rec["output_tokens"] == 6
        assert len(rec["token_s"]) == 6
        assert rec["submit_s"] <= rec["token_s"][0] <= rec["token_s"][-1]
    mod = _serve_module()
    for run in runs:
        recs = [r for r in raw if r["concurrency"] == run["concurrency"]]
        assert mod.summarize(recs)["output_tok_s_total"] == pytest.approx(run["output_tok_s_total"])
