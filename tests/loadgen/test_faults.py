"""Every fault ends as the right status with a short error, and the run goes on."""

from __future__ import annotations

import pytest
from servingbench.resources.loadgen import run_load

from tests.support.loadgen import config, ns, rows

FAULTS = [
    ("status=429", {}, "http_error", 429, "HTTP 429"),
    ("status=500", {}, "http_error", 500, "HTTP 500"),
    ("first_byte_delay_s=1.5", {"first_token_timeout_s": 0.3}, "timeout", None, "first-token timeout"),
    ("stall_s=1.5", {"total_timeout_s": 0.5}, "timeout", 200, "total timeout"),
    ("disconnect_after=3", {}, "disconnect", 200, "connection lost after 3 chunks"),
    ("malformed_after=2", {}, "protocol_error", 200, "malformed SSE"),
    ("empty=1", {}, "protocol_error", 200, "empty completion"),
]


@pytest.mark.parametrize(("fault", "kw", "status", "http", "error"), FAULTS, ids=[f[0] for f in FAULTS])
def test_fault_status(server, tmp_path, fault, kw, status, http, error):
    cfg = config(server.base_url, requests_per_step=3, headers={"X-Servingbench-Fault": fault}, **kw)
    result = run_load(cfg, tmp_path / "run", progress=False)
    steady = rows(tmp_path / "run")
    assert len(steady) == 3 and result.statuses == {status: 3}
    for r in steady:
        assert r["status"] == status and r["http_status"] == http
        assert error in r["error"] and len(r["error"]) <= 200
        assert r["sent_at"] is not None and r["finished_at"] is not None
    if fault.startswith("status="):
        ids = {r["request_id"] for r in steady}
        seen = [t for t in server.truth_rows() if t["request_id"] in ids]
        assert len(seen) == 3  # an HTTP error is recorded, never retried
    if fault == "disconnect_after=3":
        assert {r["chunks"] for r in steady} == {3}


def test_stream_cut_without_done_is_a_disconnect(server, tmp_path):
    # the connection closes after the last token: a stream cut mid-way, not a clean end
    cfg = config(server.base_url, output_tokens=4, requests_per_step=2,
                 headers={"X-Servingbench-Fault": "disconnect_after=4"})
    run_load(cfg, tmp_path / "run", progress=False)
    assert {(r["status"], r["chunks"]) for r in rows(tmp_path / "run")} == {("disconnect", 4)}


def test_drain_timeout_cancels_in_flight_requests(start_server, tmp_path):
    srv = start_server(ttft_ms=10, itl_ms=100)
    cfg = config(srv.base_url, concurrency=[3], requests_per_step=None, duration_s=0.3,
                 output_tokens=50, drain_timeout_s=0.3)
    result = run_load(cfg, tmp_path / "run", progress=False)
    steady = rows(tmp_path / "run")
    assert result.statuses == {"cancelled": 3}
    for r in steady:
        assert r["status"] == "cancelled" and "drain" in r["error"]
        assert 0 < r["chunks"] < 50 and ns(r["finished_at"]) > ns(r["last_token_at"])


def test_a_failed_request_does_not_stop_the_run(server, tmp_path):
    cfg = config(server.base_url, concurrency=[1, 2], requests_per_step=2,
                 headers={"X-Servingbench-Fault": "status=500"})
    run_load(cfg, tmp_path / "run", progress=False)
    assert [r["step"] for r in sorted(rows(tmp_path / "run"), key=lambda r: ns(r["sent_at"]))] == \
        ["c=1", "c=1", "c=2", "c=2"]
