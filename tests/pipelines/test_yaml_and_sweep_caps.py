"""A candidates file is bounded whatever its author (or an attacker) writes: YAML anchors and
aliases are refused before they expand, the candidates across all its sweeps are capped
(each is a Dagster partition, built when the code location starts), and the duplicate-name
check is one pass, not one count per name."""

from __future__ import annotations

from pathlib import Path

import pytest
from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.config import ConfigError

GOOD = ("{name: c1, instance_type: p5.48xlarge, "
        "model: meta-llama/Llama-4-Scout-17B-16E-Instruct, precision: bf16, tensor_parallel: 8}")


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "candidates.yaml"
    path.write_text(body)
    return path


def test_a_yaml_alias_bomb_in_candidates_is_refused(tmp_path):
    lines = ["x0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"x{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    body = "\n".join(lines) + f"\ncandidates:\n  - {GOOD}\n"
    with pytest.raises(ConfigError, match=r"candidates\.yaml: line 1: an anchor \(&a0\); "
                                          "anchors and aliases are not accepted"):
        load_candidates(_write(tmp_path, body))


def test_a_shared_defaults_alias_is_refused_too(tmp_path):
    body = f"candidates:\n  - &one {GOOD}\n  - *one\n"
    with pytest.raises(ConfigError, match="anchors and aliases are not accepted"):
        load_candidates(_write(tmp_path, body))
