"""A recording proxy on 127.0.0.1, for the tests that a proxy variable in the environment
never routes the project's own HTTP (tests/hostile/test_no_proxy.py, the local autoscaler's
reads)."""

from __future__ import annotations

import socket
import threading


class RecordingProxy:
    """Accepts connections on 127.0.0.1, keeps the first bytes of each, answers 502."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.seen: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    self.seen.append(conn.recv(65536))
                    conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n"
                                 b"Connection: close\r\n\r\n")
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()
