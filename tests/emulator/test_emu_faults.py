"""Each fault, requested per request via X-Servingbench-Fault, over real HTTP."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from tests.support.emulator import USAGE_OPTS, content_chunks, stream

BODY = {"prompt": "fault me", "max_tokens": 8, "ignore_eos": True, "stream": True,
        "stream_options": USAGE_OPTS}
H = "X-Servingbench-Fault"


@pytest.mark.parametrize("status", [429, 500])
def test_status_faults_answer_at_once_with_vllm_error(fixed, status):
    r = httpx.post(fixed.base_url + "/v1/completions", json=BODY, headers={H: f"status={status}"})
    assert r.status_code == status and r.headers["x-servingbench-emulated"] == "1"
    assert r.json()["error"]["code"] == status


def test_tokens_per_chunk_bundles_tokens(fixed):
    _, events = stream(fixed.base_url, "/v1/completions", {**BODY, "max_tokens": 10},
                       headers={H: "tokens_per_chunk=4"})
    chunks = content_chunks(events, chat=False)
    assert [len(c["choices"][0]["text"].split()) for c in chunks] == [4, 4, 2]
    assert [c["usage"]["completion_tokens"] for c in chunks] == [4, 8, 10]


def test_empty_stream(fixed):
    _, events = stream(fixed.base_url, "/v1/completions", BODY, headers={H: "empty=1"})
    assert content_chunks(events, chat=False) == []
    assert events[-1] == "[DONE]" and events[-2]["usage"]["completion_tokens"] == 0


def _raw_stream(port: int, fault: str) -> bytes:
    """Send one streaming request over a raw socket; return every byte until the peer closes."""
    import json
    body = json.dumps(BODY).encode()
    req = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           f"{H}: {fault}\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    out = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(req)
        try:
            while chunk := s.recv(65536):
                out += chunk
        except ConnectionResetError:
            out += b"<RST>"
    return out


def test_disconnect_after_k_tokens(fixed):
    raw = _raw_stream(fixed.port, "disconnect_after=3")
    assert raw.count(b'"text":') == 3
    assert b"[DONE]" not in raw and not raw.endswith(b"0\r\n\r\n")
    with pytest.raises(httpx.HTTPError):
        stream(fixed.base_url, "/v1/completions", BODY, headers={H: "disconnect_after=2"})


def test_malformed_sse_line_then_close(fixed):
    raw = _raw_stream(fixed.port, "malformed_after=2")
    assert raw.count(b'"text":') == 2
    assert b"data: {not json\n\n" in raw and b"[DONE]" not in raw


def test_stall_after_first_token(fixed):
    from servingbench.emulator.groundtruth import read
    t0 = time.monotonic()
    with httpx.Client(timeout=30) as c, c.stream("POST", fixed.base_url + "/v1/completions",
                                                 json=BODY, headers={H: "stall_s=0.4",
                                                                     "X-Request-ID": "stall-1"}) as r:
        times = [time.monotonic() for line in r.iter_lines() if '"text":' in line]
    assert len(times) == 8
    assert times[1] - times[0] >= 0.35 and times[-1] - t0 < 30
    deadline = time.monotonic() + 5
    while not [x for x in read(fixed.gt) if x["request_id"] == "stall-1"]:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    rec = [x for x in read(fixed.gt) if x["request_id"] == "stall-1"][0]
    sched = [s for s, _, _ in rec["chunks"]]
    gaps = [b - a for a, b in zip(sched, sched[1:], strict=False)]
    # fixed timing 20:5 ms: only the gap after the first token carries the 0.4 s stall
    assert gaps == [400_000_000 + 5_000_000] + [5_000_000] * 6


def test_first_byte_delay(fixed):
    t0 = time.monotonic()
    with httpx.Client(timeout=30) as c, c.stream("POST", fixed.base_url + "/v1/completions",
                                                 json=BODY, headers={H: "first_byte_delay_s=0.3"}) as r:
        headers_at = time.monotonic()
        assert r.status_code == 200
        r.read()
    assert headers_at - t0 >= 0.28


def test_bad_fault_header_is_a_400(fixed):
    r = httpx.post(fixed.base_url + "/v1/completions", json=BODY, headers={H: "explode=1"})
    assert r.status_code == 400 and "unknown fault" in r.json()["error"]["message"]


def test_server_survives_faults(fixed):
    r = httpx.post(fixed.base_url + "/v1/completions", json={"prompt": "ok", "max_tokens": 2})
    assert r.status_code == 200


def test_disconnect_on_a_non_streaming_request_drops_the_connection(fixed):
    with pytest.raises(httpx.HTTPError):
        httpx.post(fixed.base_url + "/v1/completions", json={**BODY, "stream": False,
                                                             "stream_options": None},
                   headers={H: "disconnect_after=2"})


def test_first_byte_delay_keeps_the_true_arrival_in_the_ground_truth(fixed):
    from servingbench.emulator.groundtruth import read
    stream(fixed.base_url, "/v1/completions", BODY,
           headers={H: "first_byte_delay_s=0.2", "X-Request-ID": "fbd-1"})
    deadline = time.monotonic() + 5
    while not [x for x in read(fixed.gt) if x["request_id"] == "fbd-1"]:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    rec = [x for x in read(fixed.gt) if x["request_id"] == "fbd-1"][0]
    # libuv (uvloop) keeps timers in whole milliseconds, so a 0.2 s sleep may end up to 1 ms early.
    assert rec["headers_ns"] - rec["arrival_ns"] >= 199_000_000
    # fixed timing 20:5 ms counts from when the engine got the request, after the delay
    assert rec["chunks"][0][0] - rec["headers_ns"] == pytest.approx(20_000_000, abs=5_000_000)
