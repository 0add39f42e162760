"""The candidates file is validated strictly: every mistake is an error naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.cli import main as cli
from servingbench.pipelines.config import DEFAULT_FILE, ConfigError

SHEET = Path(__file__).resolve().parents[2] / "pipelines" / "price_sheet.yaml"
GOOD = ("name: c1, instance_type: p5.48xlarge, "
        "model: meta-llama/Llama-4-Scout-17B-16E-Instruct, precision: bf16, tensor_parallel: 8")


def write(tmp_path, body: str) -> Path:
    p = tmp_path / "candidates.yaml"
    p.write_text(body)
    return p


def test_the_default_file_carries_the_five_instance_types_and_fitting_maverick():
    cands = load_candidates(DEFAULT_FILE)
    scout = {c.instance_type for c in cands if c.model_key == "scout"}
    assert scout == {"p5.48xlarge", "p4d.24xlarge", "g6e.48xlarge", "trn2.48xlarge", "inf2.48xlarge"}
    from servingbench.emulator.fit import fit_check
    for c in cands:
        assert fit_check(c.instance_type, c.model_key, c.precision, c.tensor_parallel).fits, c.name
        assert c.price and c.price.hourly_usd_per_node > 0 and c.price.source == "price_sheet"


@pytest.mark.parametrize("body, message", [
    (f"candidates:\n  - {{{GOOD}, precison: bf16}}\n",
     r"candidates\[0\]\.precison: unknown key \(did you mean 'precision'\?\)"),
    (f"candidates:\n  - {{{GOOD}}}\n  - {{{GOOD}}}\n", "duplicate name 'c1'"),
    (f"candidates:\n  - {{{GOOD.replace('bf16', 'fp4')}}}\n", r"candidates\[0\]\.precision: 'fp4'"),
    (f"candidates:\n  - {{{GOOD.replace('tensor_parallel: 8', 'tensor_parallel: 0')}}}\n",
     r"tensor_parallel: must be >= 1"),
    (f"candidates:\n  - {{{GOOD.replace('tensor_parallel: 8', 'tensor_parallel: eight')}}}\n",
     r"tensor_parallel: expected a positive integer, got 'eight'"),
    (f"candidates:\n  - {{{GOOD}, load: {{concurrency: 4}}}}\n",
     r"load\.concurrency: expected a list of positive integers"),
    (f"candidates:\n  - {{{GOOD}, load: {{concurency: [4]}}}}\n",
     r"load\.concurency: unknown key \(did you mean 'concurrency'\?\)"),
    (f"candidates:\n  - {{{GOOD}, load: {{worker: 2}}}}\n",
     r"load\.worker: unknown key \(did you mean 'workers'\?\)"),
    (f"candidates:\n  - {{{GOOD}, load: {{workers: 0}}}}\n",
     r"load\.workers: expected an integer >= 1, got 0"),
    (f"candidates:\n  - {{{GOOD}, load: {{workers: 2}}, scenario: {{kind: batch, requests: 8}}}}\n",
     r"load\.workers: scenario batch runs with one worker only"),
    (f"candidates:\n  - {{{GOOD}, price: {{sheet: /nonexistent.yaml}}}}\n", "price sheet /nonexistent.yaml not found"),
    ("candidates:\n  - {name: c1, model: m, precision: bf16, tensor_parallel: 1}\n", "missing key 'instance_type'"),
    ("defaults: {engine: tgi}\ncandidates: []\n", "non-empty list"),
    ("candidates: [\n", "not valid YAML"),
    ("candidate:\n  - {}\n", r"candidate: unknown key \(did you mean 'candidates'\?\)"),
])
def test_malformed_candidates_name_the_key(tmp_path, body, message):
    with pytest.raises(ConfigError, match=message):
        load_candidates(write(tmp_path, body))


def test_load_workers_from_the_candidates_file_reach_the_load_config(tmp_path):
    from servingbench.resources.loadgen.generator import LoadGenerator

    (cand,) = load_candidates(write(tmp_path, f"candidates:\n  - {{{GOOD}, load: {{workers: 3}}}}\n"))
    assert cand.load.workers == 3
    assert LoadGenerator().plan(cand).workers == 3
    assert LoadGenerator(workers=1).plan(cand).workers == 1


def test_demo_with_a_bad_candidates_file_exits_2_without_a_traceback(tmp_path, capsys):
    path = write(tmp_path, f"candidates:\n  - {{{GOOD}, colour: red}}\n")
    assert cli(["demo", "--candidates", str(path), "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "colour: unknown key" in err and "Traceback" not in err
