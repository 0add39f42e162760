"""Where the load generator's event loop stalls: each suspect timed, and its share of the lag.

The bench's fixed-timing server (benchmarks/fixed_server.py: 128 tokens, TTFT 20 ms, ITL 5 ms; pinned to CPU 1, as in
loadgen_accuracy.py) and servingbench's `run_load` (pinned to CPU 0, progress line on, into
/dev/null) for one closed-loop step. Inside the client, a 1 ms probe task records how late
each of its wake-ups comes (the loop's lag), and every suspect is timed as it runs:

* garbage collections (`gc.callbacks`, per generation),
* the recorder's flush (every 0.25 s, on the loop) and its per-request `add`,
* the recorder's writer thread (where the tree has one: the Arrow build and IPC write of a
  flush, off the loop; during a stall it can only have held the GIL the loop waited for,
  and its overlap is counted beside the loop's own suspects, so the shares may add up to
  more than the stall),
* the progress line (per request and per tick),
* `data_received` (the per-chunk work: HTTP parse, SSE split, stamping).

Each probe wake-up later than `--threshold-ms` is a stall; the time it waited is shared out
among the suspects that ran during the wait (by overlap), and what none of them covers is
"other" (other callbacks, the scheduler giving the CPU to another process). Timings are kept
in typed arrays, so the measurement allocates no tracked objects per event.

    .venv/bin/python benchmarks/loop_stalls.py [--c 256] [--count 768] [--repeat 2] [--baseline REF]
    .venv/bin/python benchmarks/loop_stalls.py --gc-cost   # only what a full collection costs

`--baseline REF` runs the load generator as it was at REF (`resources/` via `git archive`)
beside this tree, alternating, against the same server. Writes benchmarks/out/loop_stalls.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent

KINDS = ["gc gen0", "gc gen1", "gc gen2", "recorder flush", "recorder add", "progress",
         "data_received", "recorder writer"]


def child(base: str, c: int, count: int, run_dir: Path, threshold_ms: float) -> dict:
    sys.path.insert(0, os.environ.get("SB_CLIENT_ROOT") or str(ROOT))
    import asyncio
    import gc
    from array import array
    from bisect import bisect_left

    import pyarrow as pa
    from servingbench.resources.loadgen import LoadConfig, run_load
    from servingbench.resources.loadgen import progress as progress_mod
    from servingbench.resources.loadgen import recorder as recorder_mod
    from servingbench.resources.loadgen import selfwatch as selfwatch_mod
    try:
        from servingbench.resources.loadgen import connections as pool_mod
        conn_cls = pool_mod._Conn
    except ImportError:  # before the client was split into modules
        from servingbench.resources.loadgen import client as client_mod
        conn_cls = client_mod._Conn

    pa.array([0], pa.timestamp("ns", tz="UTC"))
    now = time.perf_counter_ns
    kind_no = {k: i for i, k in enumerate(KINDS)}
    ev_kind, ev_start, ev_end = array("b"), array("q"), array("q")
    probe_due, probe_at = array("q"), array("q")
    gc_start = array("q", [0])
    watching = [False]

    def on_gc(phase: str, info: dict) -> None:
        t = now()
        if phase == "start":
            gc_start[0] = t
        elif watching[0]:
            ev_kind.append(min(info["generation"], 2))
            ev_start.append(gc_start[0])
            ev_end.append(t)

    gc.callbacks.append(on_gc)

    def timed(cls, name: str, kind: str) -> None:
        orig, k = getattr(cls, name), kind_no[kind]

        def wrapper(*a, **kw):
            t0 = now()
            try:
                return orig(*a, **kw)
            finally:
                if watching[0]:
                    ev_kind.append(k)
                    ev_start.append(t0)
                    ev_end.append(now())
        setattr(cls, name, wrapper)

    # the writer thread's spans in arrays of their own: the loop thread appends to the
    # others, and three appends from two threads could interleave
    wr_start, wr_end = array("q"), array("q")
    if hasattr(recorder_mod.Recorder, "_write"):
        write_orig = recorder_mod.Recorder._write

        def write_timed(*a, **kw):
            t0 = now()
            try:
                return write_orig(*a, **kw)
            finally:
                if watching[0]:
                    wr_start.append(t0)
                    wr_end.append(now())
        recorder_mod.Recorder._write = write_timed
    timed(recorder_mod.Recorder, "flush", "recorder flush")
    timed(recorder_mod.Recorder, "add", "recorder add")
    timed(progress_mod.Progress, "tick", "progress")
    timed(progress_mod.Progress, "request_done", "progress")
    timed(conn_cls, "data_received", "data_received")

    async def probe() -> None:
        while True:
            due = now() + 1_000_000
            await asyncio.sleep(0.001)
            probe_due.append(due)
            probe_at.append(now())

    tasks = []
    start, stop = selfwatch_mod.SelfWatch.start, selfwatch_mod.SelfWatch.stop

    def watch_start(self) -> None:
        start(self)
        watching[0] = True
        tasks.append(asyncio.get_running_loop().create_task(probe()))

    async def watch_stop(self) -> None:
        watching[0] = False
        for t in tasks:
            t.cancel()
        await stop(self)

    selfwatch_mod.SelfWatch.start, selfwatch_mod.SelfWatch.stop = watch_start, watch_stop

    cfg = LoadConfig(endpoint=base, model="fixed", concurrency=[c], requests_per_step=count,
                     warmup_requests=0, input_tokens=512, output_tokens=128)
    saved = sys.stderr
    sys.stderr = open(os.devnull, "w")  # the progress line is drawn, into nowhere
    try:
        result = run_load(cfg, run_dir, progress=True)
    finally:
        sys.stderr.close()
        sys.stderr = saved
    gc.callbacks.remove(on_gc)

    for t0, t1 in zip(wr_start, wr_end, strict=True):
        ev_kind.append(kind_no["recorder writer"])
        ev_start.append(t0)
        ev_end.append(t1)
    # per suspect: how often, how long
    per_kind: dict[str, list[int]] = {k: [] for k in KINDS}
    for k, s, e in zip(ev_kind, ev_start, ev_end, strict=True):
        per_kind[KINDS[k]].append(e - s)
    # stalls: share each late wake-up's wait among the suspects that ran meanwhile
    order = sorted(range(len(ev_start)), key=ev_start.__getitem__)
    starts = [ev_start[i] for i in order]
    longest = max((ev_end[i] - ev_start[i] for i in order), default=0)
    threshold = int(threshold_ms * 1e6)
    share = dict.fromkeys([*KINDS, "other"], 0)
    lags = []
    n_stalls = 0
    for due, at in zip(probe_due, probe_at, strict=True):
        lag = at - due
        lags.append(lag / 1e6)
        if lag <= threshold:
            continue
        n_stalls += 1
        covered = 0
        j = bisect_left(starts, due - longest)
        while j < len(starts) and starts[j] < at:
            i = order[j]
            overlap = min(ev_end[i], at) - max(ev_start[i], due)
            if overlap > 0:
                share[KINDS[ev_kind[i]]] += overlap
                covered += overlap
            j += 1
        share["other"] += max(0, lag - covered)
    lags.sort()
    step = result.steps[0]

    def q(v: list, p: float) -> float | None:
        return v[min(len(v) - 1, int(p * len(v)))] if v else None

    return {
        "probe_wakeups": len(lags), "lag_ms_p50": q(lags, 0.5), "lag_ms_p99": q(lags, 0.99),
        "lag_ms_max": lags[-1] if lags else None, "stalls": n_stalls,
        "stall_ms_total": sum(v for v in share.values()) / 1e6,
        "share_ms": {k: v / 1e6 for k, v in share.items()},
        "suspects": {k: {"n": len(v), "total_ms": sum(v) / 1e6,
                         "p99_ms": q(sorted(v), 0.99) / 1e6 if v else None,
                         "max_ms": max(v) / 1e6 if v else None} for k, v in per_kind.items()},
        "loop_lag_p99_s": step["loop_lag_p99_s"], "client_cpu_share": step["client_cpu_share"],
        "client_limited": step["client_limited"], "gc_frozen": gc.get_freeze_count(),
    }


def gc_cost(repeat: int = 9) -> dict:
    """What one full collection costs in a load generator's process after its imports (the
    stall a generation-2 collection inside a step would be), before and after gc.freeze()."""
    import gc
    import statistics

    sys.path.insert(0, os.environ.get("SB_CLIENT_ROOT") or str(ROOT))
    import pyarrow as pa
    import servingbench.resources.loadgen.execute  # noqa: F401 - the load generator's own imports

    pa.array([0], pa.timestamp("ns", tz="UTC"))

    def full() -> float:
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            gc.collect()
            times.append((time.perf_counter() - t) * 1e3)
        return statistics.median(times)

    tracked = len(gc.get_objects())
    before = full()
    gc.freeze()
    after = full()
    return {"tracked_objects": tracked, "full_collection_ms": before,
            "full_collection_frozen_ms": after, "load": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--c", type=int, default=256)
    ap.add_argument("--count", type=int, default=768)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threshold-ms", type=float, default=2.0,
                    help="a probe wake-up later than this is a stall (uvloop's timers have "
                         "1 ms resolution)")
    ap.add_argument("--baseline", default=None, metavar="REF")
    ap.add_argument("--child", nargs=3, metavar=("BASE", "RUN_DIR", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--gc-cost", action="store_true",
                    help="only: one full collection's cost after the imports, then frozen")
    a = ap.parse_args(argv)
    if a.gc_cost:
        print(json.dumps(gc_cost()))
        return 0
    if a.child:
        base, run_dir, out = a.child
        Path(out).write_text(json.dumps(child(base, a.c, a.count, Path(run_dir), a.threshold_ms)))
        return 0
    sys.path[:0] = [str(HERE), str(ROOT)]
    from loadgen_accuracy import extract, start_server, taskset

    cost = json.loads(subprocess.run([*taskset(0), sys.executable, __file__, "--gc-cost"],
                                     capture_output=True, text=True, check=True, cwd=ROOT,
                                     timeout=300).stdout)
    results = []
    with tempfile.TemporaryDirectory(prefix="sb-stalls-") as d:
        tmp = Path(d)
        server, base, *_ = start_server(tmp)
        trees = [("this tree", None)]
        if a.baseline:
            trees.append((f"at {a.baseline}", extract(a.baseline, tmp)))
        try:
            for rnd in range(a.repeat):
                for name, tree in trees if rnd % 2 == 0 else list(reversed(trees)):
                    env = dict(os.environ)
                    if tree is not None:
                        env["SB_CLIENT_ROOT"] = str(tree)
                    out = tmp / f"out-{rnd}-{len(results)}.json"
                    run_dir = Path(tempfile.mkdtemp(dir=tmp)) / "run"
                    load0 = os.getloadavg()[0]
                    subprocess.run([*taskset(0), sys.executable, __file__, "--c", str(a.c),
                                    "--count", str(a.count), "--threshold-ms", str(a.threshold_ms),
                                    "--child", base, str(run_dir), str(out)],
                                   check=True, env=env, cwd=ROOT, timeout=600)
                    row = {"client": name, "pass": rnd, "load_before": load0,
                           **json.loads(out.read_text())}
                    results.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
        finally:
            server.terminate()
            server.wait(10)
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out/loop_stalls.json").write_text(json.dumps({"gc_cost": cost, "runs": results},
                                                          indent=1))
    print(f"one full collection after the load generator's imports ({cost['tracked_objects']:,} "
          f"tracked objects): {cost['full_collection_ms']:.2f} ms; after gc.freeze(): "
          f"{cost['full_collection_frozen_ms']:.3f} ms (median of 9, load {cost['load']:.1f})\n")
    print(f"c={a.c}, {a.count} requests x 128 tokens; stall = probe wake-up > {a.threshold_ms} ms late\n")
    print("| client | pass | load | lag p50 / p99 / max ms | stalls (ms in all) | "
          + " | ".join(f"{k} share" for k in [*KINDS, "other"]) + " |")
    print("|---|---:|---:|---|---|" + "---:|" * (len(KINDS) + 1))
    for r in results:
        tot = r["stall_ms_total"] or 1.0
        cells = [f"{100 * r['share_ms'][k] / tot:.0f} %" for k in [*KINDS, "other"]]
        print(f"| {r['client']} | {r['pass']} | {r['load_before']:.1f} | {r['lag_ms_p50']:.2f} / "
              f"{r['lag_ms_p99']:.2f} / {r['lag_ms_max']:.1f} | {r['stalls']} ({r['stall_ms_total']:.0f}) | "
              + " | ".join(cells) + " |")
    print("\n| client | pass | " + " | ".join(f"{k}: n, p99 / max ms" for k in KINDS) + " |")
    print("|---|---:|" + "---|" * len(KINDS))
    for r in results:
        cells = []
        for k in KINDS:
            s = r["suspects"][k]
            cells.append("-" if not s["n"] else f"{s['n']}, {s['p99_ms']:.2f} / {s['max_ms']:.2f}")
        print(f"| {r['client']} | {r['pass']} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
