"""What a hostile client or a dying parent can do to the emulator: header injection through
echoed values, unbounded buffering while a response streams, an orphaned process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import httpx
import psutil
import pytest
from servingbench.emulator.httpproto import MAX_BODY, MAX_BUFFERED, echo_value
from servingbench.emulator.process import EmulatorProcess

FIXED = ["--fixed-timing", "0:5", "--cold-start-s", "0", "--seed", "1"]


def _exchange(port: int, data: bytes) -> bytes:
    out = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        while chunk := s.recv(65536):
            out += chunk
    return out


def _head(response: bytes) -> list[bytes]:
    return response.split(b"\r\n\r\n", 1)[0].split(b"\r\n")


@pytest.mark.parametrize("value", [b"abc\rx-injected: 1", b"abc\nx-injected: 1",
                                   b"abc\x00def", b"\xff\xfe", b"a" * 300])
def test_an_unsafe_request_id_is_never_copied_into_the_response(emu, value):
    response = _exchange(emu.port, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Request-ID: " + value
                         + b"\r\nConnection: close\r\n\r\n")
    lines = _head(response)
    # either the parser refused the request, or it answered without echoing the value
    assert lines[0] in (b"HTTP/1.1 200 OK", b"HTTP/1.1 400 Bad Request"), lines[0]
    assert not any(line.lower().startswith(b"x-injected") for line in lines)
    assert not any(line.lower().startswith(b"x-request-id") for line in lines), lines


def test_a_safe_request_id_is_echoed(emu):
    r = httpx.get(emu.base_url + "/health", headers={"X-Request-ID": "req-42 a/b"})
    assert r.headers["x-request-id"] == "req-42 a/b"


def test_echo_value_rules():
    assert echo_value("ok-1") == "ok-1" and echo_value(None) is None
    assert echo_value("a\r\nb") is None and echo_value("a\tb") is None
    assert echo_value("x" * 257) is None


def test_a_body_over_the_cap_is_refused_before_it_is_read(emu):
    r = _exchange(emu.port, b"POST /v1/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n"
                  % (MAX_BODY + 1))
    assert r.startswith(b"HTTP/1.1 413") and b"connection: close" in r


def test_pipelined_bytes_sent_during_a_stream_are_not_buffered_without_bound(fixed):
    """While a long response streams, the client pushes 64 MiB of further requests: the
    server stops reading after MAX_BUFFERED (TCP backpressure), so the sender blocks long
    before it is done and the server's memory stays bounded."""
    server = psutil.Process(fixed.pid)
    rss_before = server.memory_info().rss
    body = json.dumps({"prompt": "x", "max_tokens": 100_000, "ignore_eos": True,
                       "stream": True}).encode()
    first = b"POST /v1/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)
    filler = b"x" * (1 << 20)
    more = b"POST /tokenize HTTP/1.1\r\nContent-Length: %d\r\n\r\n%b" % (len(filler), filler)
    sent = 0
    with socket.create_connection(("127.0.0.1", fixed.port), timeout=10) as s:
        s.sendall(first)
        assert s.recv(100).startswith(b"HTTP/1.1 200")  # the stream is under way
        s.settimeout(2.0)
        try:
            for _ in range(64):
                s.sendall(more)
                sent += len(more)
        except TimeoutError:
            pass
        grown = server.memory_info().rss - rss_before
    assert sent < 48 * len(more), f"the server read {sent} bytes of pipelined requests"
    assert grown < 32 * (1 << 20) + 4 * MAX_BUFFERED, grown
    assert httpx.get(fixed.base_url + "/health").status_code == 200


ORPHAN_PARENT = """
import sys, time
from servingbench.emulator.process import EmulatorProcess
e = EmulatorProcess(["--fixed-timing", "0:5", "--cold-start-s", "0"])
e.start()
print(e.pid, flush=True)
time.sleep(120)
"""


def test_the_emulator_exits_when_its_parent_is_killed():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parent = subprocess.Popen([sys.executable, "-c", ORPHAN_PARENT], cwd=root,
                              stdout=subprocess.PIPE, text=True)
    try:
        child = psutil.Process(int(parent.stdout.readline()))
        assert child.is_running()
        parent.send_signal(signal.SIGKILL)  # no finally, no atexit: only the emulator can act
        parent.wait(timeout=10)
        gone, alive = psutil.wait_procs([child], timeout=10)
        assert not alive, "the emulator outlived its SIGKILLed parent"
    finally:
        if parent.poll() is None:
            parent.kill()


def test_a_parent_gone_before_start_means_no_server(tmp_path):
    p = subprocess.run([sys.executable, "-m", "servingbench.emulator", *FIXED, "--parent-pid", "1",
                        "--port-file", str(tmp_path / "port")],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and not (tmp_path / "port").exists()


def test_a_clean_stop_still_works_with_the_watchdog():
    with EmulatorProcess(FIXED) as e:
        assert "--parent-pid" in e.proc.args
    assert e.proc.returncode == 0


def test_a_half_sent_request_head_is_answered_408_and_closed(tmp_path):
    """A client that sends part of a head and then nothing holds no connection forever."""
    with EmulatorProcess(FIXED + ["--head-timeout-s", "0.5"], ready_timeout_s=60) as emu:
        with socket.create_connection(("127.0.0.1", emu.port), timeout=10) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
            out = b""
            while chunk := s.recv(65536):  # the server closes: recv returns b""
                out += chunk
        assert _head(out)[0] == b"HTTP/1.1 408 Request Timeout"
        # a whole request on a fresh connection is still served
        assert httpx.get(emu.base_url + "/health").status_code == 200


def _read_until_closed(s: socket.socket, limit_s: float) -> bytes | None:
    """Everything the server sends until it closes; None if it is still open after
    `limit_s` (far longer than any timeout under test)."""
    s.settimeout(limit_s)
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except TimeoutError:
        return None
    return out


def test_a_connection_that_sends_nothing_is_closed():
    """Idle: 6 head timeouts (1.8 s here) with no request under way, then closed, silently;
    a keep-alive connection that has been served is idle again after its answer."""
    with EmulatorProcess(FIXED + ["--head-timeout-s", "0.3"], ready_timeout_s=60) as emu:
        with socket.create_connection(("127.0.0.1", emu.port), timeout=10) as s:
            assert _read_until_closed(s, 20) == b""
        with socket.create_connection(("127.0.0.1", emu.port), timeout=10) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            out = _read_until_closed(s, 20)
            assert out is not None and _head(out)[0] == b"HTTP/1.1 200 OK"


def test_a_trickled_body_is_answered_408_and_closed():
    """A whole head, then a body one byte every 50 ms: 408 once the body has taken the
    body timeout (the head timeout, 0.5 s here) since its head ended, and closed."""
    import select
    import time

    with EmulatorProcess(FIXED + ["--head-timeout-s", "0.5"], ready_timeout_s=60) as emu:
        with socket.create_connection(("127.0.0.1", emu.port), timeout=10) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      b"application/json\r\nContent-Length: 100000\r\n\r\n{")
            out = b""
            give_up = time.monotonic() + 20
            while time.monotonic() < give_up:
                if select.select([s], [], [], 0.05)[0]:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    out += chunk
                    continue
                try:
                    s.sendall(b" ")
                except OSError:  # closed under our feet: what it sent is read above
                    break
            else:
                pytest.fail("the trickled body held the connection for 20 s")
        assert _head(out)[0] == b"HTTP/1.1 408 Request Timeout"
        assert b"request body not complete within 0.5 s" in out


def test_a_response_longer_than_the_idle_timeout_is_not_cut():
    """The idle timer never fires on a connection whose answer is still streaming, nor on
    one whose body arrived whole: 400 tokens at 5 ms (2 s) > 6 x 0.2 s."""
    with EmulatorProcess(FIXED + ["--head-timeout-s", "0.2"], ready_timeout_s=60) as emu:
        body = {"prompt": "a b c", "max_tokens": 400, "ignore_eos": True, "stream": True}
        with httpx.Client(timeout=30) as http:
            with http.stream("POST", emu.base_url + "/v1/completions", json=body) as r:
                text = b"".join(r.iter_bytes())
            assert r.status_code == 200 and text.rstrip().endswith(b"data: [DONE]")
