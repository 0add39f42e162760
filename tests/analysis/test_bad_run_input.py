"""Malformed run folders: `servingbench analyze` exits 2 with a message naming the file (and
key), never a traceback, and writes nothing; the manifest reader turns any bytes into either
a manifest or a ManifestError (Hypothesis)."""

from __future__ import annotations

import json
import os

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servingbench.pipelines.cli import main as cli
from servingbench.resources.contract import manifest as mf

from tests.support.runbuilder import clean_run


def _manifest_bytes(run_dir, data: bytes) -> None:
    (run_dir / "manifest.json").write_bytes(data)


def _valid_manifest() -> dict:
    return clean_run().build_manifest()


def _corrupt_pages(path) -> None:
    """Overwrite the data pages, keep the footer: the schema reads, the scan fails."""
    pq.write_table(pq.read_table(path), path, compression="none")
    data = bytearray(path.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little")
    data[8:len(data) - footer - 16] = b"\xff" * (len(data) - footer - 24)
    path.write_bytes(bytes(data))


def _nested(run_dir):
    _manifest_bytes(run_dir, b"[" * 100_000 + b"]" * 100_000)


def _non_utf8(run_dir):
    _manifest_bytes(run_dir, json.dumps(_valid_manifest()).encode().replace(b"p5", b"p\xff"))


def _nan(run_dir):
    m = _valid_manifest()
    m["price_basis"]["hourly_usd_per_node"] = float("nan")
    _manifest_bytes(run_dir, json.dumps(m).encode())


def _manifest_folder(run_dir):
    (run_dir / "manifest.json").unlink()
    (run_dir / "manifest.json").mkdir()


def _log_folder(run_dir):
    (run_dir / "chunk_log.parquet").unlink()
    (run_dir / "chunk_log.parquet").mkdir()


def _not_parquet(run_dir):
    (run_dir / "steady_state_request_log.parquet").write_bytes(b"PAR1 not really")


def _bad_pages(run_dir):
    b = clean_run()
    for i in range(200):  # enough rows that the data pages are worth corrupting
        b.request("c=2", sched=2000 + i, sent=2000 + i, chunks=[(2100 + i, 1)], finished=2160 + i)
    b.write(run_dir)
    _corrupt_pages(run_dir / "chunk_log.parquet")


# case -> (make it bad, what the message must name)
BAD_RUNS = {
    "manifest nested 100,000 deep": (_nested, ["manifest.json", "nested"]),
    "manifest not UTF-8": (_non_utf8, ["manifest.json", "not UTF-8"]),
    "manifest with NaN": (_nan, ["manifest.json", "NaN"]),
    "manifest.json is a folder": (_manifest_folder, ["manifest.json", "is a folder"]),
    "chunk_log.parquet is a folder": (_log_folder, ["chunk_log.parquet", "expected a file"]),
    "request log not parquet": (_not_parquet, ["steady_state_request_log.parquet", "unreadable"]),
    "corrupt parquet pages": (_bad_pages, ["chunk_log.parquet", "unreadable parquet"]),
}


@pytest.mark.parametrize("case", list(BAD_RUNS))
def test_malformed_run_folder_exits_2_naming_the_file(tmp_path, case, capsys):
    make_bad, names = BAD_RUNS[case]
    run_dir = clean_run().write(tmp_path / "run")
    make_bad(run_dir)
    before = sorted(os.listdir(run_dir))

    assert cli(["analyze", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("MALFORMED: ")
    for name in names:
        assert name in err, err
    assert sorted(os.listdir(run_dir)) == before  # nothing written, nothing lost


@pytest.mark.parametrize("flag, value", [("--slo-ttft-s", "nan"), ("--slo-tpot-s", "inf"),
                                         ("--slo-ttft-s", "1e999"), ("--slo-tpot-s", "-1")])
def test_non_finite_slo_flag_exits_2_naming_the_flag(tmp_path, flag, value, capsys):
    run_dir = clean_run().write(tmp_path / "run")
    with pytest.raises(SystemExit) as exit_:
        cli(["analyze", str(run_dir), flag, value])
    assert exit_.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


def test_the_valid_manifest_round_trips():
    m = _valid_manifest()
    assert mf.parse(json.dumps(m).encode()) == m


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2048))
def test_any_bytes_give_a_manifest_or_a_manifest_error(data):
    try:
        assert isinstance(mf.parse(data), dict)
    except mf.ManifestError:
        pass


def _nest(inner):
    return st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)


# a named function, not a lambda: when a draw passes max_leaves, Hypothesis describes the
# strategy, and for a lambda it parses source while iterating sys.modules, which a thread
# still importing elsewhere in the worker changes under it ("dictionary changed size")
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    _nest, max_leaves=30)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(sorted(mf.TOP_KEYS)), value=_json)
def test_any_value_under_any_key_gives_a_manifest_or_a_manifest_error(key, value):
    m = _valid_manifest()
    m[key] = value
    try:
        data = json.dumps(m).encode()
    except ValueError:
        return
    try:
        assert isinstance(mf.parse(data), dict)
    except mf.ManifestError as exc:
        assert "manifest" in str(exc)
