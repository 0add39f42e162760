"""A value no column can hold never costs a record or a later flush; an endpoint with
credentials in it is refused before anything is sent or written."""

from __future__ import annotations

import pytest
from servingbench.pipelines.cli import main as cli
from servingbench.resources.contract.schemas import read_records
from servingbench.resources.loadgen import LoadConfig, LoadConfigError
from servingbench.resources.loadgen.clock import Clock
from servingbench.resources.loadgen.recorder import Recorder
from servingbench.resources.loadgen.records import Request


def _req(rid: str, at: list[int], tokens: list[int], usage: int | None) -> Request:
    r = Request(rid, "steady", "c=1", "concurrency", 1.0, 1_000)
    r.sent, r.finished, r.status, r.http_status = 1_000, 9_000, "ok", 200
    r.chunk_at, r.chunk_tokens, r.usage_total, r.usage_cum = at, tokens, usage, usage or 0
    return r


@pytest.mark.parametrize("bad", [
    _req("huge-usage", [2_000], [1], 1 << 63),
    _req("huge-chunk", [2_000, 3_000], [1, 1 << 63], 2),
    _req("negative-status", [2_000], [1], 1),
], ids=["usage 2^63", "chunk tokens 2^63", "http status 2^40"])
def test_an_unstorable_value_is_kept_as_a_protocol_error_and_flushes_go_on(tmp_path, bad):
    if bad.request_id == "negative-status":
        bad.http_status = 1 << 40
    rec = Recorder(tmp_path / "run", "run-1", Clock.start())
    rec.add(_req("before", [2_000, 3_000], [1, 1], 2))
    rec.flush()
    rec.add(bad)
    rec.flush()  # the flush after the bad row works ...
    rec.add(_req("after", [4_000], [1], 1))
    rec.flush()  # ... and so does the next one
    rec.finalize()
    steady = {r["request_id"]: r for r in read_records(tmp_path / "run", "steady_state_request_log").to_pylist()}
    assert list(steady) == ["before", bad.request_id, "after"]
    kept = steady[bad.request_id]
    assert kept["status"] == "protocol_error" and "unrecordable" in kept["error"]
    assert kept["output_tokens"] is None and kept["chunks"] == 0
    chunks = read_records(tmp_path / "run", "chunk_log").to_pylist()
    assert [c["request_id"] for c in chunks] == ["before", "before", "after"]


def test_an_endpoint_with_credentials_is_refused():
    with pytest.raises(LoadConfigError, match="endpoint") as err:
        LoadConfig(endpoint="http://admin:hunter2-pw@127.0.0.1:8000", model="m")
    assert "hunter2-pw" not in str(err.value)


def test_the_command_refuses_credentials_with_exit_2(tmp_path, capsys, caplog):
    code = cli(["load", "--endpoint", "http://admin:hunter2-pw@127.0.0.1:9/", "--model", "m",
                "--out", str(tmp_path / "run")])
    said = capsys.readouterr()
    assert code == 2 and "endpoint" in said.err and "--api-key-env" in said.err
    assert "hunter2-pw" not in said.err + said.out + caplog.text
    assert not (tmp_path / "run").exists()


def test_a_flush_that_cannot_convert_a_row_keeps_it_and_is_not_poisoned(tmp_path):
    rec = Recorder(tmp_path / "run", "run-1", Clock.start())
    rec.add(_req("good", [2_000], [1], 1))
    stream = rec.streams["steady_state_request_log"]
    row = {k: v[-1] for k, v in stream.cols.items()} | {"request_id": "odd", "load_mode": 7}
    stream.add(row)  # a defect upstream: a value of the wrong type got past the checks
    rec.flush()
    rec.add(_req("next", [3_000], [1], 1))
    rec.flush()
    rec.finalize()
    steady = read_records(tmp_path / "run", "steady_state_request_log").to_pylist()
    assert [(r["request_id"], r["status"]) for r in steady] == [
        ("good", "ok"), ("odd", "protocol_error"), ("next", "ok")]
