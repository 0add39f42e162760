"""The limit: a minimal raw-socket asyncio client for the fixed-timing test server.

It knows the server's exact framing (HTTP/1.1 chunked SSE, continuous usage), keeps one
keep-alive connection per in-flight request, and records per request the send time and
each chunk's read time (perf_counter_ns mapped to UTC once) and its token count. It is
not a general client: it is the floor against which the load generator is measured.

    python benchmarks/loadgen_rawclient.py HOST PORT {c|rate} VALUE COUNT OUT.jsonl
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import sys
import time
import uuid

_perf = time.perf_counter_ns
_CT = re.compile(rb'"completion_tokens":(\d+)')
PROMPT = " ".join(["word"] * 504)


class Raw:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.idle: list = []
        self.out: list[dict] = []
        self.anchor = time.time_ns() - _perf()

    async def request(self, scheduled: int) -> None:
        if self.idle:
            reader, writer = self.idle.pop()
        else:
            reader, writer = await asyncio.open_connection(self.host, self.port)
        rid = str(uuid.uuid4())
        body = json.dumps({"model": "fixed", "prompt": f"{rid[:8]} {PROMPT}", "max_tokens": 128,
                           "stream": True, "ignore_eos": True,
                           "stream_options": {"include_usage": True, "continuous_usage_stats": True}}).encode()
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nX-Request-ID: {rid}\r\n\r\n").encode()
        sent = _perf()
        writer.write(head + body)
        chunks, cum, buf, done = [], 0, b"", False
        while True:
            data = await reader.read(1 << 16)
            at = _perf()
            if not data:
                break
            buf += data
            while not done:
                i = buf.find(b"\n\n")
                if i < 0:
                    break
                ev, buf = buf[:i], buf[i + 2:]
                if b"[DONE]" in ev:
                    done = True
                    break
                m = _CT.search(ev)
                if m:
                    n = int(m.group(1))
                    if n > cum:
                        chunks.append((at + self.anchor, n - cum))
                        cum = n
            if done and buf.endswith(b"0\r\n\r\n"):
                break
        a = self.anchor
        self.out.append({"request_id": rid, "scheduled": scheduled + a, "sent": sent + a,
                         "finished": _perf() + a, "chunks": chunks, "ok": done})
        if done:
            self.idle.append((reader, writer))
        else:
            writer.close()

    async def closed(self, c: int, count: int) -> None:
        left = [count]

        async def worker() -> None:
            while left[0] > 0:
                left[0] -= 1
                await self.request(_perf())

        await asyncio.gather(*(worker() for _ in range(c)))

    async def open(self, rate: float, count: int, seed: int = 0) -> None:
        rng = random.Random(seed)
        t, offs = 0.0, []
        for _ in range(count):
            t += rng.expovariate(rate)
            offs.append(t)
        origin = _perf()
        tasks = []
        for off in offs:
            due = origin + int(off * 1e9)
            while (now := _perf()) < due:
                await asyncio.sleep((due - now) / 1e9)
            tasks.append(asyncio.ensure_future(self.request(due)))
        await asyncio.gather(*tasks)


async def main(host: str, port: int, mode: str, value: float, count: int, out: str) -> None:
    raw = Raw(host, port)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if mode == "c":
        await raw.closed(int(value), count)
    else:
        await raw.open(value, count)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    with open(out, "w") as f:
        for r in raw.out:
            f.write(json.dumps(r) + "\n")
    print(json.dumps({"cpu_s": cpu, "wall_s": wall}))


if __name__ == "__main__":
    h, p, m, v, n, o = sys.argv[1:7]
    import uvloop

    uvloop.run(main(h, int(p), m, float(v), int(n), o))
