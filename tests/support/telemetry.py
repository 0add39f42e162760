"""Fake telemetry endpoints on loopback that replay recorded-format samples: a DCGM exporter
(Prometheus text, dcgm-exporter 4.x default counters and labels) and the HTTP sidecar that
serves neuron-monitor's latest JSON report (the Neuron 2.x user guide's report format).
Each GET serves the next sample of the script (the last one repeats); `fail` switches the
endpoint to a 503, `hang_s` to answering late, so a test can take the source away mid-step.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MIB = 1 << 20


def dcgm_exposition(gpus: list[dict]) -> str:
    """One scrape of dcgm-exporter for `gpus` = [{util, fb_used, fb_free, power, energy_mj}]."""
    fields = [("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "util"),
              ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "fb_free"),
              ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "fb_used"),
              ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power"),
              ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
               "Total energy consumption since boot (in mJ).", "energy_mj"),
              ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", None)]
    lines = []
    for name, kind, help_text, key in fields:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for i, g in enumerate(gpus):
            labels = (f'gpu="{i}",UUID="GPU-0000000{i}-1111-2222-3333-444444444444",'
                      f'pci_bus_id="00000000:{0x53 + i:02X}:00.0",device="nvidia{i}",'
                      f'modelName="NVIDIA H100 80GB HBM3",Hostname="ip-10-0-1-23",'
                      f'DCGM_FI_DRIVER_VERSION="570.124.06",container="engine",'
                      f'namespace="servingbench",pod="sb-engine-7f3a-5d9c8"')
            value = 1980 if key is None else g[key]
            lines.append(f"{name}{{{labels}}} {value}")
    return "\n".join(lines) + "\n"


def neuron_report(cores: dict[int, tuple[float, dict]], device_used: int,
                  device_count: int = 12, device_memory: int = 32 * 1024**3,
                  error: str = "") -> dict:
    """One neuron-monitor report: cores = {index: (utilization %, memory breakdown)}."""
    return {
        "neuron_runtime_data": [{
            "pid": 4242, "neuron_runtime_tag": "vllm", "error": error,
            "report": {
                "neuroncore_counters": {
                    "period": 1.000113, "error": "",
                    "neuroncores_in_use": {str(i): {"neuroncore_utilization": u, "flops": 0}
                                           for i, (u, _) in cores.items()}},
                "memory_used": {
                    "period": 1.00001, "error": "",
                    "neuron_runtime_used_bytes": {
                        "host": 6997643264, "neuron_device": device_used,
                        "usage_breakdown": {
                            "host": {"application_memory": 6996594688, "constants": 0,
                                     "dma_buffers": 1048576, "tensors": 0},
                            "neuroncore_memory_usage": {str(i): m for i, (_, m) in cores.items()}}},
                    "loaded_models": []},
            }}],
        "system_data": {},
        "instance_info": {"instance_type": "inf2.48xlarge", "error": ""},
        "neuron_hardware_info": {"neuron_device_type": "inferentia2", "neuroncore_version": "v2",
                                 "neuron_device_count": device_count,
                                 "neuron_device_memory_size": device_memory,
                                 "neuroncore_per_device_count": 2, "error": ""},
    }


class ReplayServer:
    """Serves `bodies` in order, one per GET (the last repeats); thread-safe switches."""

    def __init__(self, bodies: list[bytes], content_type: str):
        self.bodies, self.content_type = list(bodies), content_type
        self.served = 0
        self.fail = False
        self.hang_s = 0.0
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                with fake.lock:
                    fail, hang = fake.fail, fake.hang_s
                    body = fake.bodies[min(fake.served, len(fake.bodies) - 1)]
                    if not fail and not hang:
                        fake.served += 1
                if hang:
                    time.sleep(hang)
                if fail:
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", fake.content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ReplayServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def fake_dcgm(scrapes: list[list[dict]]) -> ReplayServer:
    return ReplayServer([dcgm_exposition(g).encode() for g in scrapes],
                        "text/plain; version=0.0.4; charset=utf-8")


def fake_neuron_monitor(reports: list[dict]) -> ReplayServer:
    return ReplayServer([json.dumps(r).encode() for r in reports], "application/json")


def wait_for(predicate, timeout_s: float = 30.0, poll_s: float = 0.05) -> bool:
    """Poll until `predicate()` holds; bounded in time (a test then asserts the result)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return predicate()


class HostileTelemetry:
    """A telemetry endpoint on loopback that never gives a usable answer, one way per path:

    - `/trickle`: a 200 whose body comes one byte every `gap_s`, forever;
    - `/header-trickle`: the status line, then header bytes one every `gap_s`, forever (no
      read timeout ever fires: only an overall bound ends it);
    - `/silent`: the request is read and never answered;
    - `/gzip-bomb`: 64 MiB of zeros gzip-compressed into about 64 KiB, sent at once.

    Each connection is counted in `hits[path]`; `close()` ends every endless answer."""

    def __init__(self, gap_s: float = 0.2) -> None:
        import gzip
        import socket

        self.gap_s = gap_s
        self.bomb = gzip.compress(b"\0" * (64 << 20), 9)
        self.stopping = threading.Event()
        self.hits: dict[str, int] = {}
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _drip(self, conn, byte: bytes) -> None:
        while not self.stopping.wait(self.gap_s):
            conn.sendall(byte)

    def _serve(self, conn) -> None:
        try:
            conn.settimeout(5)
            head = b""
            while b"\r\n\r\n" not in head:
                got = conn.recv(4096)
                if not got:
                    return
                head += got
            path = head.split(b" ", 2)[1].decode()
            self.hits[path] = self.hits.get(path, 0) + 1
            if path == "/trickle":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                             b"Connection: close\r\n\r\n# ")
                self._drip(conn, b"#")
            elif path == "/header-trickle":
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                self._drip(conn, b"a")
            elif path == "/silent":
                self.stopping.wait()
            elif path == "/gzip-bomb":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: "
                             b"gzip\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                             % len(self.bomb) + self.bomb)
            else:
                conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        except OSError:
            pass
        finally:
            conn.close()

    def specs(self, *paths: str) -> list[dict]:
        """Sampler sources for `paths` (engine gauges and DCGM fields, as the emulator's)."""
        return [{"kind": "emulated", "url": f"{self.url}{p}"} for p in paths]

    def close(self) -> None:
        self.stopping.set()
        self.sock.close()
        self.thread.join(timeout=5)

    def __enter__(self) -> HostileTelemetry:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
