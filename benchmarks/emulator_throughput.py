"""Emulator hot-path benchmark: chunks/s to N concurrent streams and the server's write lag.

The server (fixed timing, so the load is exactly N / ITL chunks/s) runs pinned to one
core, a raw-socket asyncio client pinned to another. The write lag comes from the
server's own ground truth (written_ns − scheduled_ns of every chunk); the server's CPU
from /proc. Run:  .venv/bin/python benchmarks/emulator_throughput.py [--streams 256]
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


PIN = True


def _pin(core: int):
    def pin() -> None:
        if PIN and hasattr(os, "sched_setaffinity") and core < (os.cpu_count() or 1):
            os.sched_setaffinity(0, {core})
    return pin


def _cpu(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


# --- client (second process) -------------------------------------------------------------------
async def _one(port: int, tokens: int, counts: list[int], i: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"prompt": "bench", "max_tokens": tokens, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True,
                       "continuous_usage_stats": True}}).encode()
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%b" % (len(body), body))
    tail = b""
    while True:
        data = await reader.read(1 << 16)
        if not data:
            break
        data = tail + data
        counts[i] += data.count(b'"text":')
        tail = data[-16:] if b"[DONE]" not in data else b""
        if b"[DONE]" in data:
            break
    writer.close()


async def _client(port: int, streams: int, tokens: int) -> dict:
    counts = [0] * streams
    t0 = time.perf_counter()
    await asyncio.gather(*(_one(port, tokens, counts, i) for i in range(streams)))
    return {"chunks": sum(counts), "seconds": time.perf_counter() - t0}


def client_main(port: int, streams: int, tokens: int) -> None:
    import uvloop
    print(json.dumps(uvloop.run(_client(port, streams, tokens))), flush=True)


# --- driver ------------------------------------------------------------------------------------
def run(streams: int, itl_ms: float, seconds: float, framework: bool = False,
        server_args: tuple[str, ...] = ()) -> dict:
    tokens = int(seconds * 1000 / itl_ms)
    with tempfile.TemporaryDirectory() as tmp:
        port_file, gt = Path(tmp) / "port", Path(tmp) / "gt.jsonl"
        cmd = [sys.executable, "-m", "servingbench.emulator", "--fixed-timing", f"0:{itl_ms}", "--cold-start-s",
               "0", "--port", "0", "--port-file", str(port_file), "--ground-truth", str(gt),
               *server_args]
        if framework:
            cmd = [sys.executable, str(ROOT / "benchmarks" / "emulator_framework_server.py"),
                   "--itl-ms", str(itl_ms), "--port-file", str(port_file), "--ground-truth", str(gt)]
        server = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, preexec_fn=_pin(0))
        try:
            while not port_file.exists():
                time.sleep(0.01)
            port = int(port_file.read_text())
            time.sleep(0.2)
            (u0, s0), t0 = _cpu(server.pid), time.perf_counter()
            out = subprocess.run([sys.executable, __file__, "--client", str(port), "--streams",
                                  str(streams), "--tokens", str(tokens)], cwd=ROOT,
                                 capture_output=True, text=True, preexec_fn=_pin(1), check=True)
            (u1, s1), t1 = _cpu(server.pid), time.perf_counter()
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=10)
        client = json.loads(out.stdout)
        lags, written = [], []
        for line in gt.read_text().splitlines():
            for s, w, _ in json.loads(line)["chunks"]:
                lags.append((w - s) / 1e6)
                written.append(w)
    span = (max(written) - min(written)) / 1e9  # first to last chunk actually written
    # steady window: the middle half of the run, when every stream is active
    lo, hi = min(written) + span * 0.25e9, max(written) - span * 0.25e9
    steady = [lag for lag, w in zip(lags, written, strict=True) if lo <= w <= hi]
    cpu0, cpu1 = u0 + s0, u1 + s1
    return {
        "server": "starlette+uvicorn" if framework else "emulator (hand-written HTTP/1.1)",
        "streams": streams, "itl_ms": itl_ms, "target_chunks_per_s": streams * 1000 / itl_ms,
        "chunks": len(lags), "client_chunks": client["chunks"],
        "chunks_per_s": len(lags) / span,  # delivered (written), not scheduled
        "server_cpu_share": (cpu1 - cpu0) / (t1 - t0),
        "server_cpu_us_per_chunk": (cpu1 - cpu0) * 1e6 / len(lags),
        "server_sys_share_of_cpu": (s1 - s0) / (cpu1 - cpu0),
        "capacity_chunks_per_s_one_core": len(lags) / (cpu1 - cpu0),
        "loadavg_1m": os.getloadavg()[0],
        "lag_ms_p50": _pct(lags, 0.50), "lag_ms_p99": _pct(lags, 0.99),
        "lag_ms_p999": _pct(lags, 0.999), "lag_ms_max": max(lags),
        "steady_chunks_per_s": len(steady) / (span / 2), "steady_lag_ms_p99": _pct(steady, 0.99),
    }


KEYS = ("chunks_per_s", "steady_chunks_per_s", "steady_lag_ms_p99", "server_cpu_share",
        "server_cpu_us_per_chunk",
        "capacity_chunks_per_s_one_core", "lag_ms_p50", "lag_ms_p99", "lag_ms_max", "loadavg_1m")


def suite(reps: int, streams: int, itl_ms: float, seconds: float, out: Path | None) -> None:
    runs: dict[str, list[dict]] = {"emulator": [], "framework": []}
    for _ in range(reps):
        runs["emulator"].append(run(streams, itl_ms, seconds, framework=False))
        runs["framework"].append(run(streams, itl_ms, seconds, framework=True))
    summary = {name: {k: statistics.median(r[k] for r in rs) for k in KEYS}
               for name, rs in runs.items()}
    summary["ratio_cpu_per_chunk_framework_over_emulator"] = (
        summary["framework"]["server_cpu_us_per_chunk"] / summary["emulator"]["server_cpu_us_per_chunk"])
    print(json.dumps({"streams": streams, "itl_ms": itl_ms, "reps": reps, "median": summary,
                      "runs": runs}, indent=1))
    if out:
        out.write_text(json.dumps({"median": summary, "runs": runs}, indent=1))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--client", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--tokens", type=int, default=1000, help=argparse.SUPPRESS)
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--itl-ms", type=float, default=5.0)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--server-arg", action="append", default=[],
                   help="extra emulator option, e.g. --server-arg=--sched-slice-us=0")
    p.add_argument("--no-pin", action="store_true", help="let the OS place server and client")
    p.add_argument("--framework", action="store_true", help="measure the Starlette/uvicorn path")
    p.add_argument("--suite", type=int, default=0, metavar="REPS",
                   help="alternate emulator and framework REPS times each; print medians")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    global PIN
    PIN = not a.no_pin
    if a.suite:
        suite(a.suite, a.streams, a.itl_ms, a.seconds, a.json)
        return
    if a.client is not None:
        client_main(a.client, a.streams, a.tokens)
        return
    r = run(a.streams, a.itl_ms, a.seconds, a.framework, tuple(a.server_arg))
    print(json.dumps(r, indent=1))
    if a.json:
        a.json.write_text(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
