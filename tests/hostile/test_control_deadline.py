"""A control read ends by its deadline whatever the server sends: an endless run of
`100 Continue` answers, or a response head trickled one byte at a time, each piece well
inside the read timeout, may not keep the call (and the paid node behind it) waiting."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest
from servingbench.resources.http import control


def _serve(mode: str) -> tuple[str, threading.Event]:
    """A loopback server answering every connection the hostile way `mode` names, until
    the client goes away or `stop` is set."""
    srv = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def one(conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                if mode == "continue_loop":
                    while not stop.is_set():
                        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                        time.sleep(0.3)
                else:  # head_trickle: a header line that never ends
                    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                    while not stop.is_set():
                        conn.sendall(b"a")
                        time.sleep(0.3)
            except OSError:
                pass  # the client closed: what the deadline should make it do

    def accept() -> None:
        srv.settimeout(0.2)
        with srv:
            while not stop.is_set():
                try:
                    conn, _ = srv.accept()
                except TimeoutError:
                    continue
                threading.Thread(target=one, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}/", stop


@pytest.mark.timeout(30)
@pytest.mark.parametrize("mode", ["continue_loop", "head_trickle"])
def test_a_control_read_ends_by_its_deadline_whatever_the_head(mode):
    url, stop = _serve(mode)
    try:
        started = time.monotonic()
        with httpx.Client(timeout=5, trust_env=False) as http, \
                pytest.raises(control.ControlError, match="no complete answer within 0.8 s"):
            control.request(http, "GET", url, max_bytes=1 << 20, deadline_s=0.8)
        # a bound, not a timing claim: before the fix this ran until h11's head limit
        # (the 1xx loop never ended at all)
        assert time.monotonic() - started < 3
    finally:
        stop.set()


def test_a_control_read_still_answers_inside_a_running_event_loop(start_hostile):
    import asyncio

    srv = start_hostile()

    async def inside() -> int:
        with httpx.Client(timeout=5, trust_env=False) as http:
            r, _ = control.request(http, "GET", f"{srv.base_url}/metrics", max_bytes=1 << 20,
                                   deadline_s=5)
        return r.status_code

    assert asyncio.run(inside()) == 200
