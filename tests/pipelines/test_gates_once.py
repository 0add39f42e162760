"""The six gates run once per chain run: the blocking asset checks gate the run folder and
write gates.json, and the analysis in derived_metrics reads their verdicts instead of
validating every row again (no memo: what the checks found is on disk, in the run folder).
A real chain run on the embedded default (the engine emulator, the local price-list bill)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from servingbench.assets import checks as check_assets
from servingbench.pipelines.profiles import Settings
from servingbench.resources.analysis import gates, gx
from servingbench.resources.loadgen.generator import LoadGenerator

from tests.support.chain import checks, run_job

pytestmark = pytest.mark.slow  # a chain: not in `make check`


def _counting(counter: Counter, name: str, fn):
    def wrapped(*args, **kwargs):
        counter[name] += 1
        return fn(*args, **kwargs)
    return wrapped


def test_a_chain_run_gates_its_folder_once(tmp_path, monkeypatch):
    calls: Counter = Counter()
    for name in ("request_gates", "bill_gates"):
        fn = getattr(gates, name)
        monkeypatch.setattr(gates, name, _counting(calls, name, fn))
        monkeypatch.setattr(check_assets, name, getattr(gates, name))
    labels: Counter = Counter()
    validate = gx.validate
    monkeypatch.setattr(gx, "validate", lambda df, items, label: (
        labels.update([label]), validate(df, items, label))[1])

    settings = Settings(data_dir=tmp_path, time_scale=0.2, cold_start_s=0.2,
                        load=LoadGenerator(concurrency=(1,), requests_per_step=3,
                                           warmup_requests=1, output_tokens=8, input_tokens=32))
    result, _ = run_job(tmp_path, settings=settings)
    assert result.success
    assert calls["request_gates"] == 1 and calls["bill_gates"] == 1, calls
    # every validation of the gates ran once: the request facts, the phases, the bill's two
    assert labels and set(labels.values()) == {1}, labels
    (run_dir,) = (tmp_path / "runs").iterdir()
    written = json.loads((run_dir / "gates.json").read_text())
    assert [g["rule"] for g in written] == [1, 2, 3, 4, 5, 6]
    by_check = {k: v for k, v in checks(result).items() if k in gates.CHECK_NAMES.values()}
    assert len(by_check) == 6
    assert {gates.CHECK_NAMES[g["rule"]]: g["passed"] is not False for g in written} == by_check

    monkeypatch.undo()

    # what the checks recorded is what the analysis reports, even where running the rule
    # again would say otherwise: the analysis did not run it
    recorded = gates.recorded(run_dir)
    assert [g.rule for g in recorded] == [1, 2, 3, 4, 5, 6]
    marked = [gates.Gate(**{**g.as_dict(), "message": "as the check found it"})
              for g in recorded[:4]]
    gates.record(run_dir, marked)
    from servingbench.resources.analysis.analyze import analyze_run

    again = analyze_run(run_dir, gated=gates.recorded(run_dir))
    assert [g["message"] for g in again.gates[:4]] == ["as the check found it"] * 4
    assert again.gates[4:] == [g.as_dict() for g in recorded[4:]]
    # the CLI's analysis runs every rule itself
    fresh = analyze_run(run_dir)
    assert [g["message"] for g in fresh.gates[:4]] == ["passed"] * 4
