"""Every relative path in a candidates file (its price sheet, a trace, a quality dataset) is
read from the file's own folder, wherever the file is and whatever the working directory:
one rule, the one its docstring states (the shipped file is no exception)."""

from __future__ import annotations

import shutil
from pathlib import Path

from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.config import DEFAULT_FILE

ROOT = Path(__file__).resolve().parents[2]
MODEL = "meta-llama/Llama-4-Scout-17B-16E-Instruct"


def test_relative_paths_are_from_the_files_folder(tmp_path, monkeypatch):
    home = tmp_path / "mine" / "bench"
    (home / "traces").mkdir(parents=True)
    shutil.copy(ROOT / "pipelines" / "price_sheet.yaml", home / "sheet.yaml")
    shutil.copy(ROOT / "pipelines" / "traces" / "mooncake_small.jsonl", home / "traces" / "t.jsonl")
    (home / "q.jsonl").write_text('{"prompt": "2+2?", "answer": "4"}\n')
    path = home / "candidates.yaml"
    path.write_text(
        "candidates:\n"
        f"  - {{name: c1, instance_type: p5.48xlarge, model: {MODEL}, precision: bf16,\n"
        "      tensor_parallel: 8, price: {sheet: sheet.yaml},\n"
        "      scenario: {kind: trace, trace: traces/t.jsonl, trace_format: mooncake},\n"
        "      quality: {dataset: q.jsonl}}\n")
    monkeypatch.chdir(tmp_path)  # not the file's folder: nothing resolves from here
    (c,) = load_candidates(Path("mine/bench/candidates.yaml"))
    assert c.price is not None and c.price.hourly_usd_per_node > 0
    assert Path(c.scenario["trace"]) == home / "traces" / "t.jsonl"
    assert Path(c.quality.dataset) == home / "q.jsonl"


def test_the_shipped_file_follows_the_same_rule(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert all(c.price.hourly_usd_per_node > 0 for c in load_candidates(DEFAULT_FILE))
    assert all(c.price is not None for c in load_candidates(ROOT / "pipelines" / "candidates_real.yaml"))
