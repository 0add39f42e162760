"""The emulator's own Python cost per chunk, without sockets: FixedEngine + Stream
writing into a null connection on uvloop (continuous usage on, 1 token per chunk).
Separates the emulator's work from the kernel's loopback TCP cost and from other
processes on a shared machine. Run: .venv/bin/python benchmarks/emulator_hotpath_micro.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from servingbench.emulator import api
from servingbench.emulator.engine import FixedEngine
from servingbench.emulator.faults import Faults
from servingbench.emulator.metrics import Metrics
from servingbench.emulator.stream import Stream


class NullConn:
    """Stands in for HttpConnection: counts bytes instead of writing to a socket."""

    closed = False
    on_lost = None

    def __init__(self) -> None:
        self.chunks = 0
        self.bytes = 0
        self.gt = None  # the stream's ground-truth array, attached by Stream

    def write_chunk(self, data: bytes, stamp: int = -1) -> None:
        self.chunks += 1
        self.bytes += len(data)
        if stamp >= 0:
            self.gt[stamp] = time.perf_counter_ns()

    def start_stream(self, first: bytes = b"") -> None:
        pass

    def end_stream(self, last: bytes = b"", stamp: int = -1) -> None:
        self.chunks += 1
        if stamp >= 0:
            self.gt[stamp] = time.perf_counter_ns()


class NullApp:
    served_model = "meta-llama/Llama-4-Scout-17B-16E-Instruct"

    def __init__(self) -> None:
        self.metrics = Metrics(self.served_model)
        self.done = 0
        self.lags: list[int] = []

    def finished(self, stream, status, abort) -> None:
        self.done += 1
        self.lags += [w - s for s, w, _ in stream.chunks]


async def _run(streams: int, itl_ms: float, tokens: int, stagger_ms: float) -> dict:
    loop = asyncio.get_running_loop()
    app = NullApp()
    engine = FixedEngine(loop, app.metrics, 0, itl_ms)
    req = api.GenRequest(False, True, True, True, 5, tokens, 0, True)
    conns = []
    c0, w0 = time.process_time(), time.perf_counter()
    for i in range(streams):
        conn = NullConn()
        conns.append(conn)
        s = Stream(app.served_model, app.metrics, app.finished, conn, req, Faults(), f"cmpl-{i}", None,
                   time.perf_counter_ns() + int(i * stagger_ms * 1e6), tokens, "length", i)
        s.start()
        s.submitted = True
        engine.submit(s)
    while app.done < streams:
        await asyncio.sleep(0.05)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    n = sum(c.chunks for c in conns)
    lags = sorted(app.lags)
    return {"streams": streams, "itl_ms": itl_ms, "chunks": n, "cpu_us_per_chunk": cpu / n * 1e6,
            "cpu_share_at_this_rate": cpu / wall, "chunks_per_s": n / wall,
            "lag_ms_p99": lags[int(0.99 * len(lags))] / 1e6}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--itl-ms", type=float, default=5.0)
    p.add_argument("--tokens", type=int, default=800)
    a = p.parse_args()
    import uvloop
    # streams spread over one ITL, as real arrivals are: few chunks per wake-up (the hard case)
    print(json.dumps(uvloop.run(_run(a.streams, a.itl_ms, a.tokens, a.itl_ms / a.streams)), indent=1))


if __name__ == "__main__":
    main()
