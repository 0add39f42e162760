"""A real load balancer on loopback in front of several local replicas: HAProxy (Debian's
package, `make haproxy` installs it when missing), started with a generated configuration
and driven through its runtime API (the admin `stats socket`), so replicas join and leave
the pool without a restart:

* join: `add server be/<name> 127.0.0.1:<port>` (a dynamic server starts in maintenance),
  then `set server be/<name> state ready`;
* drain: `set server be/<name> state drain` (no new request; those in flight finish);
* leave: `set server be/<name> state maint`, then `del server be/<name>` once it holds no
  connection (HAProxy refuses the delete while one is open or idle in its pool).

Every response carries `X-Servingbench-Replica: <server name>` (`http-response set-header`
with the `%s` log-format tag, HAProxy 2.6), HAProxy's own answer for a chosen server too (a
502 when the replica died before its first byte, `http-after-response`), which the load
generator records in the request log's `replica` column (contract §2.2). Each request of a keep-alive client connection is
balanced on its own (`leastconn`, one of the algorithms that admit dynamic servers).
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from servingbench.resources.model_server.child import ChildProcess

HAPROXY = "/usr/sbin/haproxy"
BACKEND = "be"
HEADER = "X-Servingbench-Replica"


class BalancerError(RuntimeError):
    """HAProxy could not start, or its runtime API refused a command; says which and why."""


def find_haproxy() -> str | None:
    """The haproxy binary (Debian's path first, then PATH), or None when it is not installed."""
    return HAPROXY if Path(HAPROXY).is_file() else shutil.which("haproxy")


# the paths of the requests that are load: OpenAI's completions and chat completions
INFERENCE_PATHS = ("/v1/completions", "/v1/chat/completions")


def config(port: int, sock: Path, host: str = "127.0.0.1", metrics_port: int | None = None) -> str:
    """The generated configuration: one frontend on `host:port`, one backend with no server
    yet (each replica joins through the runtime API), the replica header on every answer.
    `metrics_port`: `/metrics` at the frontend is answered there (the pool's counters summed
    over every replica, summed_metrics.py), not by whichever replica is least busy."""
    metrics_rule = ("" if metrics_port is None
                    else "    use_backend summed_metrics if { path /metrics }\n")
    metrics_backend = ("" if metrics_port is None else f"""
backend summed_metrics
    server pool {host}:{metrics_port}
""")
    return f"""global
    stats socket {sock} mode 600 level admin
    maxconn 4096

defaults
    mode http
    timeout connect 5s
    timeout client 15m
    timeout server 15m
    timeout http-keep-alive 15m
    timeout queue 15m
    # a token stream: each chunk goes out when it arrives (no MSG_MORE, no Nagle)
    option http-no-delay

frontend fe
    bind {host}:{port}
    # the autoscaler's `rps`: inference requests only, counted in a one-entry stick table;
    # the frontend's own req_rate also counts the warm-up's tokenize calls, health checks and
    # /metrics scrapes, which would scale a pool out on traffic that is not load
    stick-table type integer size 1 store http_req_rate(1s)
    http-request track-sc0 int(0) if {{ path_beg {" ".join(INFERENCE_PATHS)} }}
{metrics_rule}    default_backend {BACKEND}

backend {BACKEND}
    balance leastconn
    # an idle server connection serves the next request of any client (the replicas are
    # ours, none keeps per-client state)
    http-reuse always
    http-response set-header {HEADER} %s
    # and on HAProxy's own answers for a server it chose (a 502 when the replica died before
    # its first byte: a spot interruption's cut, interrupted.py); none when no server was
    # chosen (a 503 with the pool empty)
    http-after-response set-header {HEADER} %s if {{ srv_name -m found }}
{metrics_backend}"""


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Balancer:
    """HAProxy as a subprocess: `with Balancer() as lb: lb.add("r0", port)`; stopped (and
    reaped) on exit, also on an exception."""

    def __init__(self, host: str = "127.0.0.1", start_timeout_s: float = 10.0,
                 binary: str | None = None, metrics_port: int | None = None) -> None:
        self.host, self.start_timeout_s, self.metrics_port = host, start_timeout_s, metrics_port
        self.binary = binary or find_haproxy()
        self.port: int | None = None
        self.child: ChildProcess | None = None
        self._dir: tempfile.TemporaryDirectory | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def sock(self) -> Path:
        assert self._dir is not None
        return Path(self._dir.name) / "admin.sock"

    def __enter__(self) -> Balancer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        if self.binary is None:
            raise BalancerError("haproxy is not installed (Debian: apt-get install haproxy; "
                                "`make haproxy` does it)")
        self._dir = tempfile.TemporaryDirectory(prefix="servingbench-lb-")
        self.port = _free_port(self.host)
        cfg = Path(self._dir.name) / "haproxy.cfg"
        cfg.write_text(config(self.port, self.sock, self.host, self.metrics_port))
        log = open(Path(self._dir.name) / "stderr", "w+b")  # noqa: SIM115 - closed in stop
        self._log = log
        # -db: stay in the foreground, under the guard (model_server/child.py): HAProxy cannot
        # watch its parent, the guard does and stops it when this process is gone
        self.child = ChildProcess([self.binary, "-db", "-f", str(cfg)], name="haproxy",
                                  stderr=log, ready=lambda _port: self.sock.exists()
                                  and self._serving(), ready_timeout_s=self.start_timeout_s,
                                  guard=True, tail=self._stderr, error=BalancerError)
        self.child.start()

    def _serving(self) -> bool:
        """Up: the runtime API lists the frontend (its listeners are bound before the admin
        socket answers). Never a connection to the frontend itself: HAProxy counts an empty
        connection as a request in the frontend's req_rate for up to two seconds, and the
        autoscaler reads that rate as traffic (`rps`), so such a probe would keep a replica
        active that no client ever asked."""
        try:
            return "FRONTEND" in self.command("show stat")
        except OSError:
            return False

    def _stderr(self) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode(errors="replace").strip()[-2000:]

    def stop(self) -> int | None:
        rc = None
        if self.child is not None:
            rc = self.child.stop()
            self._log.close()
            self.child = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None
        return rc

    @property
    def proc(self) -> subprocess.Popen | None:
        """The guard's process (HAProxy runs in its group)."""
        return None if self.child is None else self.child.proc

    # --- the runtime API ---------------------------------------------------------------
    def command(self, line: str) -> str:
        """One runtime API command on a fresh connection to the admin socket; its answer."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(str(self.sock))
            s.sendall(line.encode() + b"\n")
            chunks = []
            while data := s.recv(65536):
                chunks.append(data)
        return b"".join(chunks).decode(errors="replace").strip()

    def _ok(self, line: str) -> None:
        answer = self.command(line)
        if answer and not answer.startswith("New server registered"):
            raise BalancerError(f"haproxy refused {line!r}: {answer}")

    def add(self, name: str, port: int, host: str = "127.0.0.1") -> None:
        """Put replica `name` (serving on host:port) into the pool; new requests reach it now."""
        self._ok(f"add server {BACKEND}/{name} {host}:{port}")
        self._ok(f"set server {BACKEND}/{name} state ready")

    def drain(self, name: str) -> None:
        """No new request goes to `name`; those in flight on it finish."""
        self._ok(f"set server {BACKEND}/{name} state drain")

    def remove(self, name: str, timeout_s: float = 30.0) -> None:
        """Out of the pool for good: maintenance, then deleted once no connection is left on
        it (in flight, queued, or idle in HAProxy's pool)."""
        self._ok(f"set server {BACKEND}/{name} state maint")
        deadline = time.monotonic() + timeout_s
        while True:
            answer = self.command(f"del server {BACKEND}/{name}")
            if answer.startswith("Server deleted"):
                return
            if time.monotonic() > deadline:
                raise BalancerError(f"haproxy kept {BACKEND}/{name} for {timeout_s} s: {answer}")
            time.sleep(0.05)

    def active(self, name: str) -> int:
        """Requests in flight on `name` now (`show stat`'s `scur`)."""
        return self.stats().get(name, {}).get("scur", 0)

    def totals(self) -> dict[str, float]:
        """The whole pool: inference requests/s arriving over the last second (the
        frontend's stick table, INFERENCE_PATHS only) and requests queued at the balancer for
        a server (the backend's `qcur`)."""
        rows = self._rows()
        be = next((r for r in rows if r.get("pxname") == BACKEND and r.get("svname") == "BACKEND"), {})
        return {"rps": self.inference_rate(), "queued": float(be.get("qcur") or 0)}

    def inference_rate(self) -> float:
        """`show table fe`: the one entry's http_req_rate over the last second (no entry
        before the first inference request: 0)."""
        match = re.search(r"http_req_rate\(\d+\)=(\d+)", self.command("show table fe"))
        return float(match.group(1)) if match else 0.0

    def refused(self) -> int:
        """Requests the balancer answered itself with 503, no server taking them (the
        backend's connection errors: none in the pool, or none that accepted)."""
        be = next((r for r in self._rows() if r.get("pxname") == BACKEND
                   and r.get("svname") == "BACKEND"), {})
        return int(be.get("econ") or 0)

    def _rows(self) -> list[dict]:
        lines = self.command("show stat").splitlines()
        if not lines or not lines[0].startswith("# "):
            return []
        head = lines[0][2:].split(",")
        return [dict(zip(head, line.split(","), strict=False)) for line in lines[1:]]

    def stats(self) -> dict[str, dict]:
        """Per server of the backend: its status and current sessions (`show stat`)."""
        out = {}
        for row in self._rows():
            if row.get("pxname") == BACKEND and row.get("svname") not in ("BACKEND", None):
                out[row["svname"]] = {"status": row.get("status"),
                                      "scur": int(row.get("scur") or 0),
                                      "stot": int(row.get("stot") or 0)}
        return out
