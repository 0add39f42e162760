"""CPU per 1,000 chunks of the load generator's per-chunk path, this tree against an earlier
commit's, side by side in one run (ratios within the run are what carries over).

The path is the one a streamed chunk takes on the event loop: `_Conn.data_received` (the
stamp), httptools' parse of the chunked framing, the SSE split and usage read (sse.py), the
chunk appended to the request (records.py); then, per finished request, `Recorder.add` and,
every `--flush-every` requests, `Recorder.flush` (Arrow build + IPC write), as the run does.
No socket and no server: each response is the emulator's exact bytes (chunked SSE with
continuous usage, one HTTP chunk per event, `--tokens-per-chunk` tokens per event) fed to
the protocol piece by piece as a socket read would deliver them, so what is measured is the
client's own work and nothing the kernel or the machine's other processes add.

    .venv/bin/python benchmarks/chunk_cost.py [--baseline main] [--rounds 5] [--requests 400]
                                              [--tokens 128] [--tokens-per-chunk 1]

Each round runs every tree once in a fresh process (order alternated per round) and prints
its CPU seconds per 1k chunks, split into the hot path (data_received) and the record path
(add + flush); the summary is the median per tree and this tree's ratio to the baseline's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def response(tokens: int, per_chunk: int, prompt: int = 512) -> list[bytes]:
    """One streamed completion as the emulator writes it: the head, one piece per event."""
    head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nx-servingbench-emulated: 1\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n")
    pre = (b'data: {"id":"cmpl-0123456789abcdef","object":"text_completion","created":1764600000,'
           b'"model":"fixed","choices":[{"index":0,"text":"')
    pieces, sent = [head], 0
    while sent < tokens:
        n = min(per_chunk, tokens - sent)
        sent += n
        fin = b'"length"' if sent == tokens else b"null"
        data = (pre + b" word" * n + b'","logprobs":null,"finish_reason":' + fin
                + b',"stop_reason":null}],"usage":{"prompt_tokens":%d,"prompt_tokens_details":'
                b'{"cached_tokens":0},"total_tokens":%d,"completion_tokens":%d}}\n\n'
                % (prompt, prompt + sent, sent))
        framed = b"%x\r\n%b\r\n" % (len(data), data)
        if sent == tokens:
            tail = (b'data: {"id":"cmpl-0123456789abcdef","object":"text_completion","created":'
                    b'1764600000,"model":"fixed","choices":[],"usage":{"prompt_tokens":%d,'
                    b'"total_tokens":%d,"completion_tokens":%d}}\n\ndata: [DONE]\n\n'
                    % (prompt, prompt + sent, sent))
            framed += b"%x\r\n%b\r\n0\r\n\r\n" % (len(tail), tail)
        pieces.append(framed)
    return pieces


def child(a: argparse.Namespace) -> None:
    """One tree, one measurement: runs in its own process with that tree first on sys.path."""
    import asyncio
    import time
    import uuid

    from servingbench.resources.loadgen import connections as pool
    from servingbench.resources.loadgen.clock import Clock
    from servingbench.resources.loadgen.recorder import Recorder
    from servingbench.resources.loadgen.records import Request

    class Transport:
        def is_closing(self) -> bool:
            return False

        def write(self, data: bytes) -> None:
            pass

        def abort(self) -> None:
            pass

    class Timer:  # what _Exchange asks of its asyncio.Timeout
        def expired(self) -> bool:
            return False

        def reschedule(self, when: float) -> None:
            pass

    class PoolStub:
        def __init__(self) -> None:
            self.idle, self.conns = [], set()

    pieces = response(a.tokens, a.tokens_per_chunk)
    body = b'{"model":"fixed","max_tokens":%d,"stream":true}' % a.tokens
    message = b"POST /v1/completions HTTP/1.1\r\n\r\n" + body

    async def run() -> dict:
        loop = asyncio.get_running_loop()
        rec = Recorder(Path(a.run_dir), "bench", Clock.start())
        stub, transport = PoolStub(), Transport()
        ids = [str(uuid.uuid4()) for _ in range(a.requests)]
        hot = record = 0.0
        chunks = 0
        cpu = time.process_time
        for i, rid in enumerate(ids):
            conn = pool._Conn(stub)
            conn.transport = transport
            req = Request(rid, "steady", "c=16", "concurrency", 16.0, time.perf_counter_ns())
            ex = conn.ex = pool._Exchange(conn, req, loop.create_future(), Timer(), 1e18, ())
            ex.start(message)
            t0 = cpu()
            for p in pieces:
                conn.data_received(p)
            t1 = cpu()
            if req.status != "ok":
                raise SystemExit(f"the response was not read as ok: {req.status} {req.error}")
            chunks += len(req.chunk_at)
            rec.add(req)
            if (i + 1) % a.flush_every == 0:
                rec.flush()
            record += cpu() - t1
            hot += t1 - t0
        t1 = cpu()
        rec.flush()
        record += cpu() - t1
        rec.finalize()
        k = 1000 / chunks
        return {"hot_cpu_s_per_1k_chunks": hot * k, "record_cpu_s_per_1k_chunks": record * k,
                "cpu_s_per_1k_chunks": (hot + record) * k, "chunks": chunks}

    print(json.dumps(asyncio.run(run())))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default=None, metavar="REF")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument("--flush-every", type=int, default=25, help="requests per recorder flush")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--run-dir", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        sys.path.insert(0, a.child)
        child(a)
        return 0
    sys.path.insert(0, str(HERE))
    from benchstats import pct

    with tempfile.TemporaryDirectory(prefix="sb-chunk-cost-") as d:
        trees = [("this tree", str(ROOT))]
        if a.baseline:  # imported before this checkout (benchmarks/trees.py)
            from trees import extract

            trees.append((f"at {a.baseline}", extract(a.baseline, Path(d) / "baseline").pythonpath))
        results: dict[str, list[dict]] = {name: [] for name, _ in trees}
        for rnd in range(a.rounds):
            for name, root in trees if rnd % 2 == 0 else trees[::-1]:
                run_dir = Path(tempfile.mkdtemp(dir=d)) / "run"
                argv = [sys.executable, __file__, "--child", root, "--run-dir", str(run_dir),
                        "--requests", str(a.requests), "--tokens", str(a.tokens),
                        "--tokens-per-chunk", str(a.tokens_per_chunk),
                        "--flush-every", str(a.flush_every)]
                p = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT,
                                   env={**os.environ, "PYTHONPATH": root})
                if p.returncode != 0:
                    raise SystemExit(f"{name}: {p.stderr[-2000:]}")
                r = json.loads(p.stdout.strip().splitlines()[-1])
                results[name].append(r)
                print(json.dumps({"round": rnd, "tree": name, **r}), flush=True)
    keys = ("hot_cpu_s_per_1k_chunks", "record_cpu_s_per_1k_chunks", "cpu_s_per_1k_chunks")
    med = {name: {k: pct([r[k] for r in rs], 0.5) for k in keys} for name, rs in results.items()}
    print(f"\n{a.tokens} tokens, {a.tokens_per_chunk} per chunk, {a.requests} requests, "
          f"{a.rounds} rounds; median CPU ms per 1k chunks (hot path / record / all):")
    for name, m in med.items():
        print(f"- {name}: " + " / ".join(f"{m[k] * 1000:.2f}" for k in keys))
    if a.baseline:
        mine, theirs = med["this tree"], med[f"at {a.baseline}"]
        print("- ratio this tree / baseline: " + " / ".join(
            f"{mine[k] / theirs[k]:.2f}" for k in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
