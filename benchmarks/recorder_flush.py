"""How long one record flush blocks the load generator's event loop, this tree against an
earlier commit's recorder, side by side in one process run.

While a flush runs, nothing else on the event loop does: a chunk whose bytes arrive
meanwhile is stamped when the flush ends, and an open-loop arrival due meanwhile is sent
late. So the flush's duration is an error bound on every timestamp taken during it.

    .venv/bin/python benchmarks/recorder_flush.py [--baseline REF] [--rounds 200]
                                                 [--requests 25] [--chunks 128]

Each round adds the records of one flush interval (default: 25 requests × 128 chunks,
100 req/s × 0.25 s) to each recorder, in alternating order, then times `flush()`.
Prints the median and p99 per recorder and their ratio. A recorder with a writer thread
(`flush(wait=False)`, what the run's periodic flush calls) is timed as the loop sees it,
the hand-over only; the wait for its writer follows, untimed, before the next round. The
`add` figures are the time of adding one round's requests (`Recorder.add`, on the loop).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

from benchstats import pct

ROOT = Path(__file__).resolve().parents[1]


def _load(root: Path):
    """`servingbench.resources.loadgen.recorder` (and its Request) from `root`, in a fresh module set."""
    for name in [m for m in sys.modules if m == "servingbench" or m.startswith("servingbench.")]:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        rec = importlib.import_module("servingbench.resources.loadgen.recorder")
        try:  # a baseline from before the client was split keeps Request in client.py
            records = importlib.import_module("servingbench.resources.loadgen.records")
        except ModuleNotFoundError:
            records = importlib.import_module("servingbench.resources.loadgen.client")
        clock = importlib.import_module("servingbench.resources.loadgen.clock")
    finally:
        sys.path.remove(str(root))
    return rec, records.Request, clock.Clock


def _extract(ref: str, into: Path) -> Path:
    """The tree at `ref`, importable as `servingbench` before this checkout (trees.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from trees import extract

    return Path(extract(ref, into).pythonpath)


def _fill(rec, request_cls, n: int, chunks: int) -> None:
    now = time.perf_counter_ns
    for _ in range(n):
        r = request_cls(str(uuid.uuid4()), "steady", "rate=100", "rate", 100.0, now())
        t = now()
        r.sent, r.finished, r.status, r.http_status, r.input_tokens = t, t + 10**9, "ok", 200, 512
        r.chunk_at = [t + 20_000_000 + 5_000_000 * k for k in range(chunks)]
        r.chunk_tokens = [1] * chunks
        rec.add(r)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="effbb06", help="the commit to compare with")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--requests", type=int, default=25, help="requests per flush")
    ap.add_argument("--chunks", type=int, default=128, help="chunks per request")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sb-flush-") as tmp:
        tmp = Path(tmp)
        trees = {"this tree": ROOT, f"at {a.baseline}": _extract(a.baseline, tmp / "base")}
        recorders = {}
        for label, root in trees.items():
            mod, request_cls, clock_cls = _load(root)
            clock = clock_cls.start()
            recorders[label] = (mod.Recorder(tmp / label.replace(" ", "_"), "run-1", clock), request_cls)
        times: dict[str, list[float]] = {k: [] for k in recorders}
        adds: dict[str, list[float]] = {k: [] for k in recorders}
        for i in range(a.rounds):
            order = list(recorders) if i % 2 == 0 else list(reversed(recorders))
            for label in order:
                rec, request_cls = recorders[label]
                threaded = "wait" in inspect.signature(rec.flush).parameters
                t0 = time.perf_counter_ns()
                _fill(rec, request_cls, a.requests, a.chunks)
                t1 = time.perf_counter_ns()
                if threaded:
                    rec.flush(wait=False)
                else:
                    rec.flush()
                t2 = time.perf_counter_ns()
                if threaded:
                    rec.flush()  # the writer's turn, untimed: the next round starts clean
                adds[label].append((t1 - t0) / 1e6)
                times[label].append((t2 - t1) / 1e6)
        for rec, _ in recorders.values():
            rec.finalize()
    out = {label: {"median_ms": round(pct(v, 0.5), 3), "p99_ms": round(pct(v, 0.99), 3),
                   "add_median_ms": round(pct(adds[label], 0.5), 3)}
           for label, v in times.items()}
    new, old = out["this tree"], out[f"at {a.baseline}"]
    out["ratio_median"] = round(new["median_ms"] / old["median_ms"], 3)
    print(json.dumps({"rounds": a.rounds, "requests": a.requests, "chunks": a.chunks, **out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
