"""Scheduling lag through bursts: servingbench's open loop beside the raw-socket client.

Both clients send the same arrival schedule (a `schedule` scenario's segments, drawn once
from one seed: quiet → 100 req/s → quiet → 200 req/s → quiet) to the same fixed-timing
server (benchmarks/fixed_server.py, TTFT 20 ms, ITL 5 ms, 16 tokens), alternating, each in
its own process. The lag of a request is `sent − scheduled` (the raw client's send stamp
and servingbench's `sent_at`, both the moment the bytes go to the socket). Printed per
client and round: p50 / p99 / max over all requests, and p99 over the first 0.5 s after
each jump from a quiet segment into a burst (where a loop that cannot keep up shows first).

    .venv/bin/python benchmarks/schedule_lag.py [--rounds 2] [--scale 1.0]

The target (issue of the schedules): servingbench's p99 ≤ the raw client's + 1 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchstats import pct  # noqa: E402

QUIET = 0.5


def segments(scale: float) -> list[dict]:
    return [{"duration_s": 2.0 * scale, "rate": QUIET}, {"duration_s": 3.0 * scale, "rate": 100.0},
            {"duration_s": 2.0 * scale, "rate": QUIET}, {"duration_s": 3.0 * scale, "rate": 200.0},
            {"duration_s": 1.0 * scale, "rate": 0.0}]


def jumps(segs: list[dict]) -> list[float]:
    """Offsets (s) where a burst follows a quiet segment."""
    out, t = [], 0.0
    for prev, seg in zip(segs, segs[1:], strict=False):
        t += prev["duration_s"]
        if seg["rate"] >= 50 and prev["rate"] <= QUIET:
            out.append(t)
    return out


def offsets(segs: list[dict]) -> list[float]:
    from servingbench.resources.loadgen.scenarios.schedule import plan

    return list(plan(segs, "poisson", seed=0)[0])


# --- the two clients, each run in its own process ------------------------------------
def run_raw(port: int, segs: list[dict], out: Path) -> None:
    import uvloop
    from loadgen_rawclient import Raw

    offs = offsets(segs)

    async def go() -> None:
        raw = Raw("127.0.0.1", port)
        tasks = []
        origin = time.perf_counter_ns()
        for off in offs:
            due = origin + int(off * 1e9)
            while (now := time.perf_counter_ns()) < due:
                await asyncio.sleep((due - now) / 1e9)
            tasks.append(asyncio.ensure_future(raw.request(due)))
        await asyncio.gather(*tasks)
        rows = [{"scheduled": r["scheduled"] - raw.anchor - origin, "lag": r["sent"] - r["scheduled"]}
                for r in raw.out]
        out.write_text(json.dumps(rows))

    uvloop.run(go())


def run_sb(port: int, segs: list[dict], out: Path) -> None:
    from servingbench.resources.contract.schemas import read_records
    from servingbench.resources.loadgen import LoadConfig, run_load
    from servingbench.resources.loadgen.scenarios.spec import from_mapping

    scenario, _ = from_mapping({"kind": "schedule", "segments": segs})
    cfg = LoadConfig(endpoint=f"http://127.0.0.1:{port}", model="fixed", concurrency=[],
                     warmup_requests=0, input_tokens=64, output_tokens=16, use_tokenize=False,
                     scenario=scenario)
    with tempfile.TemporaryDirectory() as tmp:
        run_load(cfg, Path(tmp) / "run", progress=False)
        log = read_records(Path(tmp) / "run", "steady_state_request_log").to_pylist()
    t0 = min(r["scheduled_at"].value for r in log)
    first = offsets(segs)[0]
    rows = [{"scheduled": r["scheduled_at"].value - t0 + int(first * 1e9),
             "lag": r["sent_at"].value - r["scheduled_at"].value} for r in log]
    out.write_text(json.dumps(rows))


# --- the driver ----------------------------------------------------------------------
def summary(rows: list[dict], segs: list[dict]) -> dict:
    lags = [r["lag"] / 1e6 for r in rows]
    after = [r["lag"] / 1e6 for r in rows
             if any(j * 1e9 <= r["scheduled"] < (j + 0.5) * 1e9 for j in jumps(segs))]
    return {"n": len(rows), "p50_ms": pct(lags, 0.5), "p99_ms": pct(lags, 0.99),
            "max_ms": max(lags), "jump_p99_ms": pct(after, 0.99), "jump_n": len(after)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every segment's length")
    ap.add_argument("--client", choices=["raw", "sb"], help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    segs = segments(a.scale)
    if a.client:
        (run_raw if a.client == "raw" else run_sb)(a.port, segs, a.out)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        server = subprocess.Popen([sys.executable, str(HERE / "fixed_server.py"), "--ttft-ms", "20",
                                   "--itl-ms", "5", "--port", "0", "--port-file", str(port_file)])
        try:
            for _ in range(200):
                if port_file.exists() and port_file.read_text().strip():
                    break
                time.sleep(0.05)
            port = int(port_file.read_text())
            print(f"schedule: {json.dumps(segs)}; {len(offsets(segs))} requests; "
                  f"{os.cpu_count()} cores", flush=True)
            results: dict[str, list[dict]] = {"raw": [], "sb": []}
            for rnd in range(a.rounds):
                for client in ("raw", "sb"):
                    out = Path(tmp) / f"{client}{rnd}.json"
                    subprocess.run([sys.executable, __file__, "--client", client, "--port",
                                    str(port), "--out", str(out), "--scale", str(a.scale)],
                                   check=True)
                    s = summary(json.loads(out.read_text()), segs)
                    results[client].append(s)
                    print(f"round {rnd} {client:>3}: n={s['n']} lag p50 {s['p50_ms']:.3f} ms, "
                          f"p99 {s['p99_ms']:.3f} ms, max {s['max_ms']:.3f} ms; after a jump "
                          f"(n={s['jump_n']}) p99 {s['jump_p99_ms']:.3f} ms", flush=True)
            for rnd in range(a.rounds):
                raw, sb = results["raw"][rnd], results["sb"][rnd]
                print(f"round {rnd}: sb p99 − raw p99 = {sb['p99_ms'] - raw['p99_ms']:+.3f} ms; "
                      f"after a jump {sb['jump_p99_ms'] - raw['jump_p99_ms']:+.3f} ms "
                      f"(target ≤ +1 ms)")
        finally:
            server.terminate()
            server.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
