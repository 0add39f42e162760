"""Emulator request-parsing benchmark: short keep-alive requests per second, and the
server's CPU per request, for two emulator source trees side by side (alternating runs).

Streaming throughput (benchmarks/emulator_throughput.py) hardly exercises request parsing;
this does: every request is a small POST /tokenize (head + JSON body) or GET /health, sent
back to back on C connections, so the server's time goes to parsing and answering.

    git archive main emulator | tar -x -C /tmp/emu-before
    .venv/bin/python benchmarks/emulator_requests.py --before /tmp/emu-before --reps 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BODY = json.dumps({"model": "meta-llama/Llama-4-Scout-17B-16E-Instruct",
                   "prompt": "hello world " * 8}).encode()
REQUESTS = [
    b"POST /tokenize HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
    b"X-Request-ID: bench-1\r\nContent-Length: %d\r\n\r\n%b" % (len(BODY), BODY),
    b"GET /health HTTP/1.1\r\nHost: bench\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n",
]


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _conn(port: int, n: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for i in range(n):
        writer.write(REQUESTS[i % 2])
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
    writer.close()


def client_main(port: int, conns: int, n: int) -> None:
    async def go() -> None:
        await asyncio.gather(*(_conn(port, n) for _ in range(conns)))
    asyncio.run(go())


def run(src: Path, conns: int, n: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        server = subprocess.Popen(
            [sys.executable, "-m", "servingbench.emulator", "--fixed-timing", "0:5", "--cold-start-s", "0",
             "--port", "0", "--port-file", str(port_file)], cwd=src, stdout=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(src), "PYTHONDONTWRITEBYTECODE": "1"})
        try:
            deadline = time.monotonic() + 30
            while not port_file.exists():
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"emulator from {src} did not start")
                time.sleep(0.01)
            port = int(port_file.read_text())
            time.sleep(0.2)
            c0, t0 = _cpu(server.pid), time.perf_counter()
            subprocess.run([sys.executable, __file__, "--client", str(port), "--conns",
                            str(conns), "--n", str(n)], check=True, timeout=600)
            c1, t1 = _cpu(server.pid), time.perf_counter()
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=10)
    total = conns * n
    return {"requests_per_s": total / (t1 - t0), "server_cpu_us_per_request": (c1 - c0) * 1e6 / total}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--client", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--conns", type=int, default=8)
    p.add_argument("--n", type=int, default=2000, help="requests per connection")
    p.add_argument("--before", type=Path, required=False, help="the other emulator source root")
    p.add_argument("--reps", type=int, default=3)
    a = p.parse_args()
    if a.client is not None:
        client_main(a.client, a.conns, a.n)
        return
    trees = {"after": ROOT} | ({"before": a.before} if a.before else {})
    runs: dict[str, list[dict]] = {k: [] for k in trees}
    for _ in range(a.reps):
        for name, src in trees.items():
            runs[name].append(run(src, a.conns, a.n))
    med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}
    if "before" in med:
        med["ratio_cpu_per_request_after_over_before"] = (
            med["after"]["server_cpu_us_per_request"] / med["before"]["server_cpu_us_per_request"])
        med["ratio_requests_per_s_after_over_before"] = (
            med["after"]["requests_per_s"] / med["before"]["requests_per_s"])
    print(json.dumps({"conns": a.conns, "n": a.n, "reps": a.reps, "median": med, "runs": runs},
                     indent=1))


if __name__ == "__main__":
    main()
