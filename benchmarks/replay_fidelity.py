"""Trace replay fidelity: how late the load generator sends a trace's requests.

A synthetic Mooncake trace (Poisson arrivals, shared 512-token prefixes) is replayed
against the emulator (fixed timing 20 ms TTFT / 2 ms ITL, 16 output tokens) at 50 and
200 requests/s, one after the other in one run. Lag = sent_at − scheduled_at of every
request (contract §3 sched_lag); the analyzer marks an open-loop step invalid when its
p99 exceeds 10 ms.

The replay builds every request body before its schedule starts (`prebuilt`, what the
load generator does). Beside it, alternating in the same run, `at_send` rebuilds the
former path: prompts built ahead, but each body serialized to JSON at its send time
(through a shim in this file only), so the two lags compare side by side.

    .venv/bin/python benchmarks/replay_fidelity.py [--requests 1000] [--reps 1]

Prints a markdown table and writes benchmarks/out/replay_fidelity.json.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchstats import pct  # noqa: E402
from servingbench.emulator.process import EmulatorProcess  # noqa: E402
from servingbench.resources.contract.schemas import read_records  # noqa: E402
from servingbench.resources.loadgen import LoadConfig, run_load  # noqa: E402
from servingbench.resources.loadgen.loops import LoadLoops  # noqa: E402
from servingbench.resources.loadgen.prompts import Item  # noqa: E402
from servingbench.resources.loadgen.scenarios import trace as trace_mod  # noqa: E402
from servingbench.resources.loadgen.scenarios.spec import Scenario  # noqa: E402

PREBUILT = trace_mod.request_bodies
REAL_SEND = LoadLoops.send


def _items_ahead(run, rows):
    """The former path's preparation: prompts only; the bodies are left to the send."""
    builder = trace_mod.PromptBuilder(run.cfg.seed, run.prompts.words_per_token)
    return [Item(builder.prompt(r), r.output_tokens) for r in rows]


async def _send_serializing(self, phase, step, mode, target, scheduled, item, tag=None,
                            body=None):
    if isinstance(body, Item):  # an `at_send` replay hands the prompt, not its body
        item, body = body, None
    return await REAL_SEND(self, phase, step, mode, target, scheduled, item, tag, body)


def use(variant: str) -> None:
    trace_mod.request_bodies = PREBUILT if variant == "prebuilt" else _items_ahead
    LoadLoops.send = REAL_SEND if variant == "prebuilt" else _send_serializing


def make_trace(path: Path, n: int, rate: float, seed: int = 1) -> None:
    rng = random.Random(seed)
    t = 0.0
    with open(path, "w") as f:
        for _ in range(n):
            t += rng.expovariate(rate)
            ids = [rng.randrange(8), 1000 + rng.randrange(10_000)]
            f.write(json.dumps({"timestamp": round(t * 1000, 3), "input_length": 512 + rng.randint(16, 400),
                                "output_length": 16, "hash_ids": ids}) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=1, help="alternations of the two variants")
    a = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp, \
            EmulatorProcess(["--fixed-timing", "20:2", "--cold-start-s", "0"]) as emu:
        import httpx
        model = httpx.get(f"{emu.base_url}/v1/models").json()["data"][0]["id"]
        trace = Path(tmp) / "trace.jsonl"
        make_trace(trace, a.requests, rate=10.0)
        order = [(target, variant, rep) for target in (50.0, 200.0) for rep in range(a.reps)
                 for variant in (("prebuilt", "at_send") if rep % 2 == 0
                                 else ("at_send", "prebuilt"))]
        for target, variant, rep in order:
            use(variant)
            run_dir = Path(tmp) / f"r{int(target)}-{variant}-{rep}"
            cfg = LoadConfig(endpoint=emu.base_url, model=model, concurrency=[], warmup_requests=0,
                             scenario=Scenario("trace", trace=trace, trace_format="mooncake",
                                               speedup=target / 10.0))
            run_load(cfg, run_dir, progress=False)
            rows = read_records(run_dir, "steady_state_request_log").to_pylist()
            lags = [(r["sent_at"].value - r["scheduled_at"].value) / 1e9 for r in rows]
            hits = sum(1 for r in rows if (r["cached_tokens"] or 0) > 0)
            results.append({"rate": target, "bodies": variant, "rep": rep, "requests": len(rows),
                            "ok": sum(r["status"] == "ok" for r in rows),
                            "lag_p50_ms": pct(lags, 0.5) * 1e3, "lag_p99_ms": pct(lags, 0.99) * 1e3,
                            "lag_max_ms": max(lags) * 1e3, "cache_hit_share": hits / len(rows)})
        use("prebuilt")
    print("| rate (req/s) | bodies | rep | requests | ok | lag p50 (ms) | lag p99 (ms) | "
          "lag max (ms) | cache hits |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['rate']:g} | {r['bodies']} | {r['rep']} | {r['requests']} | {r['ok']} | "
              f"{r['lag_p50_ms']:.2f} | {r['lag_p99_ms']:.2f} | {r['lag_max_ms']:.1f} | "
              f"{r['cache_hit_share']:.0%} |")
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    (out / "replay_fidelity.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
