"""The calibration: a fit recovers figures it was not told, folds keep curves together, the
error table and bands are what the reports print. Small, so it runs in the suite; the real
fit over the published table is `servingbench calibrate` (docs/emulator.md "Fidelity")."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from servingbench.emulator import calibrate as C
from servingbench.emulator import crossval as X
from servingbench.emulator import fidelity
from servingbench.emulator import predict as pr
from servingbench.emulator.rows import read_row

FIXTURE = Path(__file__).parents[1] / "fixtures" / "calibration" / "published_rows.csv"
# the figures a synthetic table was made with; the fit starts from the priors
TRUTH = {"accelerators": {"H100-SXM-80GB": {"memory": 0.55, "compute": 0.35}},
         "engines": {"vllm": {"step_overhead_ms": 6.0, "seq_overhead_us": 20.0, "frontend_ms": 12.0}}}


def synthetic_samples() -> list[C.Sample]:
    """Rows of one H100 and vLLM, their 'published' figures predicted under TRUTH."""
    base = {"row_id": "", "model": "Llama-3.1-8B", "total_params_b": "8", "active_params_b": "8",
            "weight_precision": "bf16", "kv_cache_precision": "", "engine": "vllm",
            "engine_version": "", "accelerator": "H100-SXM-80GB", "instance": "", "n_accel": "1",
            "tp": "1", "ep": "", "input_tokens": "512", "output_tokens": "128",
            "load_kind": "concurrency", "load_value": "1", "speculative": "", "num_requests": "32"}
    raw = []
    for i, (load, value, inp) in enumerate([("concurrency", 1, 512), ("concurrency", 16, 512),
                                            ("concurrency", 64, 2048), ("request_rate", 4, 1024),
                                            ("offline", "", 256), ("concurrency", 4, 4096)]):
        raw.append({**base, "row_id": f"s{i}", "load_kind": load, "load_value": str(value),
                    "input_tokens": str(inp), "source": f"synthetic {i // 3}"})
    rows = [read_row(d, i) for i, d in enumerate(raw)]
    truth = [pr.simulate(r, TRUTH) for r in rows]
    for d, t in zip(raw, truth, strict=True):
        d.update({"output_tok_s_total": str(t.output_tok_s), "ttft_ms_median": str(t.ttft_ms_median),
                  "tpot_ms_median": str(t.tpot_ms_median)})
    return C.samples_of(rows, raw)


def test_a_fit_recovers_the_figures_a_table_was_made_with():
    samples = synthetic_samples()
    before = X.errors(samples, C.predict_samples(samples, {}))
    cal, figs = C.fit(samples, rounds=6, max_nfev=20)
    after = X.errors(samples, C.predict_samples(samples, cal))
    mape = {m: sum(after[(m, "all")]) / len(after[(m, "all")]) for m in C.METRICS}
    assert sum(before[("tok_s", "all")]) / len(samples) > 0.2  # the priors are far off
    # the weak pull to the priors keeps TTFT's split between the API server and the engine
    # from being exact; throughput and TPOT are
    assert mape["tok_s"] < 0.04 and mape["ttft_ms"] < 0.12 and mape["tpot_ms"] < 0.04
    got = cal["accelerators"]["H100-SXM-80GB"]
    assert got["memory"] == pytest.approx(0.55, rel=0.2)
    assert {f.path for f in figs} >= {("accelerators", "H100-SXM-80GB", "memory"),
                                      ("engines", "vllm", "frontend_ms")}


def test_folds_hold_whole_curves_out_together():
    samples = C.load_table(FIXTURE)
    parts = X.folds(samples, 4)
    assert sorted(i for p in parts for i in p) == list(range(len(samples)))
    fold_of = {i: k for k, p in enumerate(parts) for i in p}
    by_curve: dict[str, set[int]] = {}
    for i, s in enumerate(samples):
        by_curve.setdefault(s.curve, set()).add(fold_of[i])
    assert all(len(folds) == 1 for folds in by_curve.values())
    # the trn2 Scout curve (c=1, sweep, rate) is one curve of three rows
    assert max(len([s for s in samples if s.curve == c]) for c in by_curve) == 3


def test_the_median_itl_a_source_gave_as_tpot_is_compared_as_such():
    samples = {s.row.row_id: s for s in C.load_table(FIXTURE)}
    assert samples["r077"].stat["tpot_ms"] == "itl_median"
    assert samples["r087"].stat["tpot_ms"] == "median"
    assert samples["r116"].stat["ttft_ms"] == "mean"


def test_ordering_counts_pairs_the_table_orders(tmp_path):
    samples = synthetic_samples()
    truth = [dict(s.published) for s in samples]
    agree = X.ordering(samples, truth)
    assert agree["curve"][0] == agree["curve"][1] > 0


def test_repeats_of_one_configuration_are_no_pair_along_a_curve():
    """Two rows stating the same inputs (a repeat, or a flag no column carries) give the
    predictor nothing to order them by: they are not counted, agreeing or not."""
    import dataclasses
    samples = synthetic_samples()[:2]
    twin = dataclasses.replace(samples[0], row=dataclasses.replace(samples[0].row, row_id="s0b"),
                               published={"tok_s": samples[0].published["tok_s"] * 1.1})
    # the twin measured 10 % faster than s0, predicted 10 % slower
    preds = [dict(s.published) for s in samples] + [{"tok_s": samples[0].published["tok_s"] * 0.9}]
    assert X.ordering(samples + [twin], preds)["curve"] == (1, 1)
    # the same rows at different loads are a pair, and the wrong order counts against it
    shifted = dataclasses.replace(twin, row=dataclasses.replace(twin.row, load_value=2.0))
    assert X.ordering(samples + [shifted], preds)["curve"] == (1, 2)


def test_bands_read_back():
    b = fidelity.band("H100-SXM-80GB", "vllm")
    text = b.text()
    # the shipped calibration.yaml holds H100 and vLLM rows: a band, with its row count
    assert b.calibrated and text.startswith("±") and "published H100-SXM-80GB" in text
    assert 0 < b.mape < 1 and b.mape >= b.accelerator_mape
    # a host no published row covers is never given a number
    local = fidelity.band("cpu-this-host", "llamacpp")
    assert not local.calibrated and local.text().startswith("uncalibrated")


def test_the_command_writes_figures_with_their_provenance(tmp_path):
    table = tmp_path / "table.csv"
    samples_raw = list(csv.DictReader(FIXTURE.open()))
    rows = [r for r in samples_raw if r["accelerator"] == "H100-SXM-80GB"]
    with table.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    out = tmp_path / "calibration.yaml"
    proc = subprocess.run([sys.executable, "-m", "servingbench.pipelines.cli", "calibrate",
                           "--table", str(table), "--folds", "0", "--rounds", "1",
                           "--evaluations", "3", "--write", "--out", str(out)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    doc = yaml.safe_load(out.read_text())
    assert doc["provenance"]["rows"] == len(rows) and len(doc["provenance"]["sha256"]) == 64
    assert "H100-SXM-80GB" in doc["figures"]["accelerators"]
    assert doc["error_bands"]["accelerators"]["H100-SXM-80GB"]["tok_s"]["rows"] == len(rows)
    assert "fitted figures" in proc.stdout


@pytest.mark.parametrize("argv, says", [(["--folds", "-1"], "--folds -1"),
                                         (["--folds", "1"], "--folds 1")])
def test_bad_flags_exit_2_naming_them(argv, says):
    proc = subprocess.run([sys.executable, "-m", "servingbench.pipelines.cli", "calibrate",
                           "--table", str(FIXTURE), *argv], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and says in proc.stderr
