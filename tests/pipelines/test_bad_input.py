"""Bad configuration and flags: every one is exit 2 with a message naming the file, key or
flag, never a traceback; the candidates loader turns any bytes into either candidates or a
ConfigError (Hypothesis)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.cli import main as cli
from servingbench.pipelines.config import ConfigError
from servingbench.resources.loadgen.config import LoadConfig
from servingbench.resources.loadgen.errors import LoadConfigError

GOOD = ("name: c1, instance_type: p5.48xlarge, "
        "model: meta-llama/Llama-4-Scout-17B-16E-Instruct, precision: bf16, tensor_parallel: 8")


def _one(extra: str = "", good: str = GOOD) -> str:
    return f"candidates:\n  - {{{good}{', ' + extra if extra else ''}}}\n"


# case -> (file body (str) or bytes, regex the message must match)
BAD_CONFIG = {
    "instance_type with /": (_one(good=GOOD.replace("p5.48xlarge", "p5.48xlarge/../x")),
                             r"candidates\[0\]\.instance_type: 'p5\.48xlarge/\.\./x' is not"),
    "model starting with --": (_one(good=GOOD.replace("meta-llama/", "--trust-remote-code/")),
                               r"candidates\[0\]\.model: '--trust-remote-code/.*not starting with '-'"),
    "price.sheet: 5": (_one("price: {sheet: 5}"), r"candidates\[0\]\.price\.sheet: expected a string, got 5"),
    "rate .nan": (_one("load: {rates: [.nan]}"), r"load\.rates: expected a list of finite positive"),
    "rate .inf": (_one("load: {rates: [.inf]}"), r"load\.rates: expected a list of finite positive"),
    "rate true": (_one("load: {rates: [true]}"), r"load\.rates: expected a list of finite positive"),
    "huge input_tokens": (_one("scenario: {input_tokens: 100000000000, output_tokens: 1, dataset: null}"),
                          r"scenario\.input_tokens: 100000000000 is above the maximum"),
    "prompt longer than max_model_len": (
        _one("max_model_len: 1024, scenario: {input_tokens: 1000, output_tokens: 128, dataset: null}"),
        r"scenario: input_tokens \+ output_tokens = 1,128 does not fit max_model_len 1,024"),
    "output_tokens 0": (_one("scenario: {input_tokens: 8, output_tokens: 0, dataset: null}"),
                        r"scenario\.output_tokens: expected a positive integer, got 0"),
    "concurrency 10^6": (_one("load: {concurrency: [1000000]}"),
                         r"load\.concurrency: 1000000 is above the maximum 4,096"),
    "node_count 1000": (_one("node_count: 1000"), r"node_count: 1000 is above the maximum 64"),
    "numeric key": (_one("7: x"), r"candidates\[0\]\.7: unknown key"),
    "not UTF-8": (b"candidates:\n  - {name: \xff}\n", r"candidates\.yaml: not UTF-8 text"),
    "YAML nested 10,000 deep": ("x: " + "[" * 10_000 + "]" * 10_000 + "\n",
                                r"candidates\.yaml: (nested too deeply|not valid YAML)"),
    "not YAML": ("candidates: [\n", r"candidates\.yaml: not valid YAML"),
}


def _write(tmp_path: Path, body) -> Path:
    path = tmp_path / "candidates.yaml"
    path.write_bytes(body if isinstance(body, bytes) else body.encode())
    return path


@pytest.mark.parametrize("case", list(BAD_CONFIG))
def test_bad_config_is_a_config_error_naming_the_key(tmp_path, case):
    body, message = BAD_CONFIG[case]
    with pytest.raises(ConfigError, match=message):
        load_candidates(_write(tmp_path, body))


@pytest.mark.parametrize("case", ["instance_type with /", "price.sheet: 5", "not UTF-8"])
def test_demo_exits_2_on_bad_config_without_traceback(tmp_path, case, capsys):
    path = _write(tmp_path, BAD_CONFIG[case][0])
    assert cli(["demo", "--candidates", str(path), "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert "candidates.yaml" in err and "Traceback" not in err
    assert not (tmp_path / "data").exists()  # nothing started, nothing written


def test_candidates_file_that_is_a_folder(tmp_path, capsys):
    (tmp_path / "candidates.yaml").mkdir()
    assert cli(["demo", "--candidates", str(tmp_path / "candidates.yaml")]) == 2
    assert "candidates.yaml: is a folder" in capsys.readouterr().err


def test_price_sheet_with_infinite_price(tmp_path):
    sheet = tmp_path / "sheet.yaml"
    sheet.write_text("region: us-east-1\npurchase_option: on_demand\nretrieved_on: 2026-11-28\n"
                     "hourly_usd_per_node: {p5.48xlarge: .inf}\n")
    with pytest.raises(ConfigError, match=r"sheet\.yaml: hourly_usd_per_node must map .* finite"):
        load_candidates(_write(tmp_path, _one(f"price: {{sheet: {sheet}}}")))


@pytest.mark.parametrize("argv, flag", [
    (["demo", "--duration-s", "nan"], "--duration-s"),
    (["demo", "--duration-s", "inf"], "--duration-s"),
    (["demo", "--cold-start-s", "-inf"], "--cold-start-s"),
    (["demo", "--requests", "0"], "--requests"),
    (["load", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--out", "x", "--duration", "nan"],
     "--duration"),
    (["load", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--out", "x", "--rate", "inf"],
     "--rate"),
    (["load", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--out", "x",
      "--total-timeout", "1e999"], "--total-timeout"),
    (["load", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--out", "x",
      "--profile", "nan:1"], "--profile"),
])
def test_non_finite_numeric_flags_exit_2_naming_the_flag(tmp_path, monkeypatch, argv, flag, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli(argv)
    assert exit_.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_demo_concurrency_zero_names_the_flag(capsys):
    assert cli(["demo", "--concurrency", "1,0"]) == 2
    assert "--concurrency" in capsys.readouterr().err


@pytest.mark.parametrize("field, value, message", [
    ("model", "--trust-remote-code", "model: '--trust-remote-code' must not start with '-'"),
    ("duration_s", float("nan"), "duration_s: must be a finite positive number"),
    ("input_tokens", 10**12, "input_tokens: 1,000,000,000,000 is above the maximum"),
])
def test_load_config_refuses_flags_nan_and_huge_prompts(field, value, message):
    kw = {"endpoint": "http://127.0.0.1:9", "model": "m", field: value}
    with pytest.raises(LoadConfigError, match=message):
        LoadConfig(**kw)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=1024))
def test_any_bytes_give_candidates_or_a_config_error(tmp_path, data):
    try:
        assert load_candidates(_write(tmp_path, data))
    except ConfigError:
        pass


def _nest(inner):
    return st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["name", "model", "sheet", "rates", "concurrency", "input_tokens",
                         "output_tokens", "dataset", "x"]) | st.text(max_size=8), inner, max_size=3)


# a named function, not a lambda: Hypothesis describes a lambda by parsing source while it
# iterates sys.modules, which another thread of the worker may change (tests/analysis'
# manifest fuzz test failed on it)
_yaml_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=16),
    _nest, max_leaves=20)
_KEYS = ["name", "instance_type", "model", "precision", "tensor_parallel", "node_count",
         "model_revision", "expert_parallel", "engine", "image_digest", "max_model_len",
         "scenario", "load", "price", "models", "model_bursts"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(_KEYS), value=_yaml_value)
def test_any_value_under_any_key_gives_candidates_or_a_config_error(tmp_path, key, value):
    doc = yaml.safe_load(_one())
    doc["candidates"][0][key] = value
    try:
        load_candidates(_write(tmp_path, yaml.safe_dump(doc)))
    except ConfigError as exc:
        assert "candidates.yaml" in str(exc)
