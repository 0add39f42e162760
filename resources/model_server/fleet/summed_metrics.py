"""`/metrics` of a pool of real engine replicas behind HAProxy: every replica's counters
summed, so the load generator's reconciliation (server_metrics.py) compares its client-side
counts with what the whole pool served, not with whichever replica HAProxy picked for the
scrape.

Replicas come and go during an episode: a replica that stopped is counted with the last
exposition it served (read after its drain, before its process stopped), counters only (a
stopped replica's gauges are no reading of the present). A replica killed without a drain
(a spot interruption) takes its counters with it, which the reconciliation then flags.
The requests HAProxy answered itself with 503 (no replica in the pool, as while a scale
from zero starts one) are the pool's answers too: they are added to the finished-requests
counter as `status="503"`, so the client's failed requests have their witness.
Served on loopback; HAProxy routes the frontend's `/metrics` here (balancer.py)."""

from __future__ import annotations

import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from servingbench.resources.http.prometheus import parse

# the engine is on loopback: a proxy variable must not route the scrape elsewhere
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
COUNTER_SUFFIXES = ("_total", "_bucket", "_count", "_sum")


def scrape(url: str, timeout_s: float = 2.0) -> str | None:
    try:
        with _NO_PROXY.open(url, timeout=timeout_s) as resp:
            return resp.read().decode("utf-8", "replace")
    except OSError:
        return None


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


FINISHED = "servingbench:requests_finished_total"  # the launcher's counter, by HTTP status


def summed(live: list[str], stopped: list[str], refused: int = 0) -> str:
    """One exposition: each sample (name and label set) summed over the live replicas'
    expositions, and over the stopped replicas' for counters; `refused`: the balancer's own
    503 answers, added to the finished requests."""
    totals: dict[tuple[str, str], float] = {}
    if refused:
        totals[(FINISHED, _labels({"status": "503"}))] = float(refused)
    for text, counters_only in [(t, False) for t in live] + [(t, True) for t in stopped]:
        for name, samples in parse(text).items():
            if counters_only and not name.endswith(COUNTER_SUFFIXES):
                continue
            for labels, value in samples:
                key = (name, _labels(labels))
                totals[key] = totals.get(key, 0.0) + value
    return "".join(f"{name}{labels} {value:g}\n" for (name, labels), value in sorted(totals.items()))


class SummedMetrics:
    """`with SummedMetrics() as pm: pm.replicas = replica_set`; `pm.port` is where HAProxy
    sends `/metrics`."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.replicas = None  # the ReplicaSet, set once it exists (it needs the balancer)
        self.balancer = None  # the Balancer, once started (it needs this server's port)
        pool = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = pool.exposition().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="pool-metrics",
                                        daemon=True)

    def __enter__(self) -> SummedMetrics:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)

    def exposition(self) -> str:
        reps = self.replicas
        if reps is None:
            return ""
        live, stopped = [], []
        for rep in list(reps.replicas.values()):
            if rep.final_metrics is not None:
                stopped.append(rep.final_metrics)
            elif rep.state in ("ready", "draining", "noticed") and rep.metrics_url:
                text = scrape(rep.metrics_url)
                if text is not None:
                    live.append(text)
        refused = 0
        if self.balancer is not None:
            try:
                refused = self.balancer.refused()
            except OSError:
                refused = 0
        return summed(live, stopped, refused)
