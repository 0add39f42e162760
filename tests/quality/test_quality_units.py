"""Quality parity without an engine: the evaluation set, exact scoring, the Wilson interval,
the parity rule and how a reference run is found."""

from __future__ import annotations

import json

import pytest
from servingbench.resources.contract import manifest as mf
from servingbench.resources.quality import find_reference, parity, score, wilson
from servingbench.resources.quality.evalset import (
    KINDS,
    EvalSetError,
    build,
    default_items,
    load_jsonl,
    set_sha256,
)


def test_default_set_is_deterministic_and_checkable():
    a, b = default_items(50, seed=3), default_items(50, seed=3)
    assert a == b and set_sha256(a) == set_sha256(b)
    assert set_sha256(default_items(50, seed=4)) != set_sha256(a)
    assert {i.kind for i in a} == set(KINDS)
    for item in a:
        assert item.answer and item.prompt
        if item.kind == "arithmetic":
            expr = item.prompt.removeprefix("What is ").split("?")[0].replace("×", "*")
            assert str(eval(expr)) == item.answer  # noqa: S307 - our own generated text
        if item.kind == "ordering":
            nums = item.prompt.split(": ")[1].split("?")[0].split(", ")
            assert str(min(int(n) for n in nums)) == item.answer


def test_user_jsonl_is_appended_and_checked(tmp_path):
    good = tmp_path / "extra.jsonl"
    good.write_text('{"prompt": "2+2?", "answer": "4"}\n\n{"prompt": "sky?", "answer": "blue"}\n')
    name, items = build(5, 0, good)
    assert len(items) == 7 and name.endswith("+extra.jsonl") and items[-1].answer == "blue"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x"}\n')
    with pytest.raises(EvalSetError, match="bad.jsonl:1"):
        load_jsonl(bad)


@pytest.mark.parametrize("got,expected,ok", [
    ("12", "12", True), (" 12.\n", "12", True), ("**Paris**", "Paris", True),
    ('"river"', "river", True), ("Paris\nis the capital", "Paris", True),
    ("The answer is 12", "12", False), ("", "12", False), ("121", "12", False),
])
def test_scoring_is_exact_after_normalization(got, expected, ok):
    assert score(got, expected) is ok


def test_wilson_interval():
    low, high = wilson(50, 100)
    assert low == pytest.approx(0.4038, abs=1e-4) and high == pytest.approx(0.5962, abs=1e-4)
    assert wilson(0, 0) == (None, None)
    low, high = wilson(0, 20)
    assert low == 0.0 and 0.15 < high < 0.17


def _summary(correct: int, n: int = 100, sha: str = "s") -> dict:
    low, high = wilson(correct, n)
    return {"n": n, "correct": correct, "accuracy": correct / n, "ci95_low": low,
            "ci95_high": high, "eval_set": "x", "eval_set_sha256": sha}


def test_parity_rule():
    ref = ("ref-run", _summary(60))
    assert parity(_summary(58), "c", "r", 0.05, ref).passed is True      # inside the margin
    assert parity(_summary(50), "c", "r", 0.05, ref).passed is True      # intervals overlap
    failed = parity(_summary(20), "c", "r", 0.05, ref)
    assert failed.passed is False and failed.status == "fail"
    assert "intervals do not overlap" in failed.message
    assert parity(_summary(60), "r", "r", 0.05, None).passed is True     # the reference's first run
    none = parity(_summary(60), "c", "r", 0.05, None)
    assert none.passed is False and none.status == "no_reference"


def _run(runs, name, candidate, source, created_ns, summary):
    d = runs / name
    d.mkdir(parents=True)
    m = mf.empty(name, source, created_ns)
    m["candidate"] = candidate
    mf.dump(m, d / "manifest.json")
    if summary is not None:
        (d / "quality_summary.json").write_text(json.dumps(summary))
    return d


def test_find_reference_takes_the_newest_measured_run_on_the_same_set(tmp_path):
    _run(tmp_path, "old", "ref", "measured", 1_000, _summary(60))
    _run(tmp_path, "new", "ref", "measured", 2_000, _summary(62))
    _run(tmp_path, "emu", "ref", "emulated", 3_000, _summary(99))
    _run(tmp_path, "other-set", "ref", "measured", 4_000, _summary(10, sha="t"))
    me = _run(tmp_path, "me", "ref", "measured", 5_000, _summary(61))
    assert find_reference(tmp_path, "ref", "s", exclude=me)[0] == "new"
    assert find_reference(tmp_path, "nobody", "s") is None


def test_random_weights_fail_parity_saying_so(tmp_path):
    """A run of real vLLM on this host serves random weights (deployment.json `load_format:
    dummy`): its verdict says it fails by design, the terminal and the comparison show it."""
    from servingbench.assets.quality import decide_parity
    from servingbench.resources.contract import deployment_record
    from servingbench.resources.report.comparison import _quality_cells

    _run(tmp_path, "ref", "ref", "measured", 1_000, _summary(27))
    runs = {}
    for name, load_format in (("vllm", "dummy"), ("llamacpp", None)):
        d = _run(tmp_path, name, name, "measured", 2_000, _summary(0))
        deployment_record.write(d, {"endpoint": "http://127.0.0.1:1", "emulated": False,
                                    **({"load_format": load_format} if load_format else {})})
        value = {"run_dir": str(d), "status": "evaluated", "reference": "ref", "margin": 0.05}
        runs[name] = decide_parity(value, name, tmp_path)
    assert runs["vllm"].passed is False and runs["vllm"].weights == "random"
    assert "random (vLLM's --load-format dummy)" in runs["vllm"].message
    assert "by design" in json.loads((tmp_path / "vllm" / "quality_parity.json").read_text())[
        "message"]
    assert runs["llamacpp"].passed is False and runs["llamacpp"].weights is None

    class Run:
        quality, emulated = None, False
        parity = runs["vllm"].as_dict()
    assert "random weights, by design" in _quality_cells(Run())[1].html
