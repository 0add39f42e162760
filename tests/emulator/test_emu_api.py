"""API shapes as vLLM returns them, over real HTTP to a real emulator process."""

from __future__ import annotations

import json

import httpx

from tests.support.emulator import SCOUT, USAGE_OPTS, content_chunks, stream


def test_completion_stream_shape_and_continuous_usage(emu):
    body = {"model": SCOUT, "prompt": "hello there world", "max_tokens": 12, "ignore_eos": True,
            "stream": True, "stream_options": USAGE_OPTS}
    resp, events = stream(emu.base_url, "/v1/completions", body)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.headers["x-servingbench-emulated"] == "1"
    assert events[-1] == "[DONE]"
    chunks = content_chunks(events, chat=False)
    assert len(chunks) == 12
    first = chunks[0]
    assert first["object"] == "text_completion" and first["model"] == SCOUT
    assert first["id"].startswith("cmpl-")
    assert set(first["choices"][0]) == {"index", "text", "logprobs", "finish_reason", "stop_reason"}
    assert [c["usage"]["completion_tokens"] for c in chunks] == list(range(1, 13))
    assert all(c["usage"]["prompt_tokens"] == 3 for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 11 + ["length"]
    final = events[-2]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 12
    assert final["usage"]["total_tokens"] == 15


def test_chat_stream_shape_role_chunk_then_content(emu):
    body = {"messages": [{"role": "user", "content": "Say something"}], "max_tokens": 5,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    resp, events = stream(emu.base_url, "/v1/chat/completions", body)
    assert resp.status_code == 200
    role = events[0]
    assert role["object"] == "chat.completion.chunk"
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    chunks = content_chunks(events, chat=True)
    assert len(chunks) == 5
    assert all("usage" not in c for c in chunks)  # include_usage only: usage in the final chunk
    assert events[-2]["usage"]["completion_tokens"] == 5 and events[-2]["choices"] == []
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_final_usage_equals_sum_of_streamed_tokens_without_ignore_eos(emu):
    body = {"prompt": "count me", "max_tokens": 40, "stream": True,
            "stream_options": {"include_usage": True}}
    for _ in range(3):
        _, events = stream(emu.base_url, "/v1/completions", body)
        text = "".join(c["choices"][0]["text"] for c in content_chunks(events, chat=False))
        n = events[-2]["usage"]["completion_tokens"]
        assert 1 <= n <= 40
        tok = httpx.post(emu.base_url + "/tokenize", json={"prompt": text}).json()
        assert tok["count"] == n  # the output re-tokenizes to exactly completion_tokens


def test_min_tokens_is_honoured(emu):
    for _ in range(5):
        r = httpx.post(emu.base_url + "/v1/completions",
                       json={"prompt": "x", "max_tokens": 30, "min_tokens": 25})
        assert 25 <= r.json()["usage"]["completion_tokens"] <= 30


def test_non_streaming_shapes(emu):
    r = httpx.post(emu.base_url + "/v1/completions",
                   json={"model": SCOUT, "prompt": "abc", "max_tokens": 7, "ignore_eos": True})
    assert r.status_code == 200 and r.headers["x-servingbench-emulated"] == "1"
    j = r.json()
    assert j["object"] == "text_completion"
    assert j["choices"][0]["finish_reason"] == "length"
    assert len(j["choices"][0]["text"].split()) == 7
    assert j["usage"] == {"prompt_tokens": 1, "total_tokens": 8, "completion_tokens": 7,
                          "prompt_tokens_details": {"cached_tokens": 0}}
    r = httpx.post(emu.base_url + "/v1/chat/completions",
                   json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                         "ignore_eos": True})
    j = r.json()
    assert j["object"] == "chat.completion" and j["id"].startswith("chatcmpl-")
    assert j["choices"][0]["message"]["role"] == "assistant"
    assert j["usage"]["completion_tokens"] == 4


def test_models_tokenize_health(emu):
    r = httpx.get(emu.base_url + "/v1/models")
    assert r.json()["data"][0]["id"] == SCOUT and r.headers["x-servingbench-emulated"] == "1"
    a = httpx.post(emu.base_url + "/tokenize", json={"model": SCOUT, "prompt": "Hello, world!"}).json()
    b = httpx.post(emu.base_url + "/tokenize", json={"model": SCOUT, "prompt": "Hello, world!"}).json()
    assert a == b and a["count"] == 4 == len(a["tokens"]) and a["max_model_len"] > 0
    h = httpx.get(emu.base_url + "/health")
    assert h.status_code == 200 and h.headers["x-servingbench-emulated"] == "1"


def _error(r: httpx.Response, status: int) -> str:
    assert r.status_code == status
    assert r.headers["x-servingbench-emulated"] == "1"
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == status
    return err["message"]


def test_bad_requests_get_vllm_error_shape(emu):
    base = emu.base_url
    msg = _error(httpx.post(base + "/v1/completions", content=b"{not json"), 400)
    assert "JSON" in msg
    _error(httpx.post(base + "/v1/completions", json={"model": "gpt-4", "prompt": "x"}), 404)
    _error(httpx.post(base + "/v1/completions", json={"prompt": "x", "max_tokens": 0}), 400)
    _error(httpx.post(base + "/v1/completions", json={"prompt": "x", "max_tokens": "9"}), 400)
    _error(httpx.post(base + "/v1/completions", json={"max_tokens": 3}), 400)
    _error(httpx.post(base + "/v1/chat/completions", json={"messages": []}), 400)
    _error(httpx.post(base + "/v1/completions",
                      json={"prompt": "x", "max_tokens": 3, "min_tokens": 5}), 400)
    msg = _error(httpx.post(base + "/v1/completions",
                            json={"prompt": "x", "max_tokens": 10**9}), 400)
    assert "maximum context length" in msg
    _error(httpx.post(base + "/v1/completions",
                      json={"prompt": "x", "stream_options": {"include_usage": True}}), 400)
    r = httpx.get(base + "/nope")
    assert r.status_code == 404 and r.headers["x-servingbench-emulated"] == "1"
    assert httpx.get(base + "/v1/completions").status_code == 405


def test_request_id_echoed_and_keep_alive_reuses_the_connection(emu):
    with httpx.Client() as client:
        for i in range(3):
            r = client.post(emu.base_url + "/v1/completions", json={"prompt": "a", "max_tokens": 2},
                            headers={"X-Request-ID": f"req-{i}"})
            assert r.headers["x-request-id"] == f"req-{i}"
        assert r.status_code == 200


def test_metrics_and_status_carry_the_emulated_mark(emu):
    r = httpx.get(emu.base_url + "/metrics")
    assert r.headers["x-servingbench-emulated"] == "1" and "EMULATED" in r.text
    s = httpx.get(emu.base_url + "/servingbench/status")
    assert s.json()["emulated"] is True and s.json()["config"]["calibrated"] is False
    assert json.loads(s.content)["config"]["candidate"] == "p5.48xlarge"
    assert "EMULATED" in s.json()["version"]
    v = httpx.get(emu.base_url + "/version")
    assert v.json()["version"] == s.json()["version"] and v.headers["x-servingbench-emulated"] == "1"


def test_aiohttp_client_parses_the_stream(emu):
    import asyncio

    import aiohttp

    async def go() -> list[bytes]:
        async with aiohttp.ClientSession() as s, s.post(
                emu.base_url + "/v1/completions",
                json={"prompt": "a", "max_tokens": 6, "ignore_eos": True, "stream": True}) as r:
            assert r.headers["x-servingbench-emulated"] == "1"
            return [line async for line in r.content if line.startswith(b"data: ")]

    lines = asyncio.run(go())
    assert len(lines) == 7 and lines[-1] == b"data: [DONE]\n"


def test_expect_100_continue_and_pipelined_requests(emu):
    import socket
    body = json.dumps({"prompt": "x", "max_tokens": 1}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", emu.port), timeout=10) as s:
        s.sendall(head)
        assert s.recv(100).startswith(b"HTTP/1.1 100 Continue")
        get = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        s.sendall(body + get)  # a second request pipelined behind the first
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert data.count(b"HTTP/1.1 200 OK") == 2 and b"connection: close" in data


def _raw(port: int, data: bytes) -> bytes:
    import socket
    out = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_malformed_http_gets_an_error_and_a_close(emu):
    r = _raw(emu.port, b"GARBAGE\r\n\r\n")
    assert r.startswith(b"HTTP/1.1 400") and b"connection: close" in r
    body = json.dumps({"prompt": "x", "max_tokens": 1}).encode()
    r = _raw(emu.port, b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
             b"Connection: close\r\n\r\n%x\r\n%b\r\n0\r\n\r\n" % (len(body), body))
    assert r.startswith(b"HTTP/1.1 200")  # a chunked request body is decoded by the parser
    r = _raw(emu.port, b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
    assert r.startswith(b"HTTP/1.1 400") and b"connection: close" in r
    r = _raw(emu.port, b"POST /v1/completions HTTP/1.1\r\nContent-Length: nope\r\n\r\n")
    assert r.startswith(b"HTTP/1.1 400")
    r = _raw(emu.port, b"GET /health HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n")
    assert r.startswith(b"HTTP/1.1 431")
    assert httpx.get(emu.base_url + "/health").status_code == 200  # the server lives on
