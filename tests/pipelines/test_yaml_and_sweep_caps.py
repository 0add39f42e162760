"""A candidates file is bounded whatever its author (or an attacker) writes: YAML anchors and
aliases are refused before they expand, the candidates across all its sweeps are capped
(each is a Dagster partition, built when the code location starts), and the duplicate-name
check is one pass, not one count per name."""

from __future__ import annotations

from pathlib import Path

import pytest
from servingbench.pipelines import catalog, sweeps
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


def _sweep(n: int) -> str:
    return (f"  s{n}:\n    base: {{instance_type: p5.48xlarge, "
            "model: meta-llama/Llama-4-Scout-17B-16E-Instruct, precision: bf16, "
            "tensor_parallel: 8}\n"
            "    matrix:\n      tensor_parallel: [2, 4, 8]\n")


def test_the_candidates_across_all_sweeps_are_capped(tmp_path, monkeypatch):
    # each sweep is within its own cap; together they are not
    monkeypatch.setattr(sweeps, "MAX_FILE_CANDIDATES", 7)
    body = f"candidates:\n  - {GOOD}\nsweeps:\n" + "".join(_sweep(n) for n in range(3))
    with pytest.raises(ConfigError, match=r"candidates\.yaml: more than 7 candidates across the "
                                          r"file and its sweeps \(reached at sweep 's2'\)"):
        load_candidates(_write(tmp_path, body))
    monkeypatch.setattr(sweeps, "MAX_FILE_CANDIDATES", 10)
    assert load_candidates(_write(tmp_path, body))  # 1 + 3 x 3, runnable or skipped


def test_the_cap_is_exit_2_from_the_command_line(tmp_path, monkeypatch, capsys):
    from servingbench.pipelines.cli import main as cli

    monkeypatch.setattr(sweeps, "MAX_FILE_CANDIDATES", 7)
    body = f"candidates:\n  - {GOOD}\nsweeps:\n" + "".join(_sweep(n) for n in range(3))
    path = _write(tmp_path, body)
    assert cli(["sweep", "list", "--candidates", str(path)]) == 2
    assert "candidates.yaml: more than 7 candidates" in capsys.readouterr().err


def test_duplicate_names_are_found_in_one_pass():
    class Counted(str):
        compared = 0

        def __eq__(self, other):
            Counted.compared += 1
            return str.__eq__(self, other)

        __hash__ = str.__hash__

    n = 2000
    names = [Counted(f"c{i}") for i in range(n)] + [Counted("c7")]
    assert catalog.duplicates(names) == ["c7"]
    assert Counted.compared < 10 * n  # `names.count(n)` per name compared n^2 times


def test_a_schedule_file_with_aliases_is_exit_2(tmp_path, capsys):
    from servingbench.pipelines.cli import load as load_cli

    path = tmp_path / "schedule.yaml"
    path.write_text("seg: &s {duration_s: 1, rate: 1}\nsegments: [*s, *s]\n")
    code = load_cli.main(["--endpoint", "http://127.0.0.1:9", "--model", "m", "--out",
                          str(tmp_path / "r"), "--schedule", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "schedule.yaml" in err and "anchors and aliases are not accepted" in err
