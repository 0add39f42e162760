"""Control reads (the probe, /tokenize, /metrics) share one certificate check per process:
building one reads and parses the CA bundle (~35 ms of CPU), and each control read built two,
so a load run's prompt sizing and the autoscaler's every tick paid for them. Certificates
are still checked as httpx checks them by default."""

from __future__ import annotations

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import certifi
import pytest
from servingbench.resources.http import control
from servingbench.resources.loadgen.prompts import Tokenizer


class _Tokenize(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps({"count": 5, "tokens": [1, 2, 3, 4, 5]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Tokenize)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_control_reads_build_no_certificate_check_of_their_own(server, monkeypatch):
    control.tls()  # this process's one
    loads = []
    where = certifi.where
    monkeypatch.setattr(certifi, "where", lambda: loads.append(1) or where())
    with control.client(timeout=5, trust_env=False) as http:
        for _ in range(3):
            r, raw = control.request(http, "POST", f"{server}/tokenize", json={"prompt": "a"},
                                     max_bytes=1 << 16, deadline_s=5)
            assert r.status_code == 200 and json.loads(raw)["count"] == 5
    tok = Tokenizer(server, "m", {}, enabled=True)
    assert [tok.count("one two three") for _ in range(3)] == [5, 5, 5]
    assert loads == []


def test_the_shared_check_is_httpx_s_default():
    ctx = control.tls()
    assert ctx is control.tls()
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
