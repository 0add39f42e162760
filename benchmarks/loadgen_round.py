"""A closed-loop round that ends together: this tree's load generator (and an earlier
commit's, alternating) at c=256 against the accuracy bench's fixed-timing server.

At c=256 every request of a round ends within a few milliseconds of the others, and each
one's slot sends the next request at once: the client must finish the round's ends and
the next round's sends before the first new requests' first chunks come back (TTFT 20 ms
here), or those chunks wait to be stamped and the TTFT error's tail is the client's. This
measures that stretch directly, per run (3 rounds, 768 requests):

* TTFT |error| p99 (client TTFT − the server's own, per request; as loadgen_accuracy.py),
* the send stretch: from the first end of round 1 to the last send of round 2, per request
  (µs of the client's time a slot turning over takes, when 256 turn over together),
* the TTFT error split at its p99: server read delay (request sent → read by the server)
  and client stamp delay (first chunk written → stamped), which says whose time it is.

    .venv/bin/python benchmarks/loadgen_round.py [--baseline REF] [--repeat 6] [--c 256]

Prints each run and the medians; the machine's speed drifts by tens of percent over
minutes, so only the two trees' figures from the same alternating run compare.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from benchstats import pct  # noqa: E402
from loadgen_accuracy import extract, measure, run_client, start_server  # noqa: E402


def stretch(reqs: list[dict], c: int) -> float:
    """µs per request from round 1's first end to round 2's last send."""
    by_send = sorted(reqs, key=lambda r: r["sent"])
    first_end = min(r["finished"] for r in by_send[:c])
    return (by_send[2 * c - 1]["sent"] - first_end) / c / 1e3


def split(reqs: list[dict], truth: dict[str, dict]) -> tuple[float, float]:
    """p99 of the server's read delay and of the client's first-chunk stamp delay, ms."""
    read, stamp = [], []
    for r in reqs:
        t = truth.get(r["request_id"])
        if t is None or not r["chunks"] or not t["chunks"]:
            continue
        read.append((t["arrival_ns"] - r["sent"]) / 1e6)
        stamp.append((r["chunks"][0][0] - t["chunks"][0][1]) / 1e6)
    return pct(read, 0.99), pct(stamp, 0.99)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default=None, metavar="REF",
                    help="an earlier commit to compare with, alternating (without: this tree alone)")
    ap.add_argument("--repeat", type=int, default=6, help="runs of each tree, alternating")
    ap.add_argument("--c", type=int, default=256)
    a = ap.parse_args()
    out: dict[str, list[tuple]] = {"this tree": []}
    if a.baseline:
        out[f"at {a.baseline}"] = []
    with tempfile.TemporaryDirectory(prefix="sb-round-") as d:
        tmp = Path(d)
        tree = extract(a.baseline, tmp) if a.baseline else None
        proc, base, truth_path, _ = start_server(tmp)
        try:
            for i in range(a.repeat):
                order = [("this tree", "servingbench")]
                if a.baseline:
                    order.append((f"at {a.baseline}", "baseline"))
                for name, key in order if i % 2 == 0 else order[::-1]:
                    summary, reqs = run_client(key, base, "c", a.c, 3 * a.c, tmp, baseline=tree)
                    time.sleep(0.3)  # the server writes a request's truth once nothing is due
                    truth = {t["request_id"]: t for t in map(json.loads, truth_path.read_text().splitlines())
                             if t["request_id"]}
                    row = measure(summary, reqs, truth, "c", a.c)
                    fig = (row["ttft_abs_err_ms_p99"], stretch(reqs, a.c), *split(reqs, truth))
                    out[name].append(fig)
                    print(f"{name}: TTFT |err| p99 {fig[0]:.2f} ms, send stretch {fig[1]:.1f} µs/request, "
                          f"read delay p99 {fig[2]:.2f} ms, stamp delay p99 {fig[3]:.2f} ms", flush=True)
        finally:
            proc.terminate()
            proc.wait(10)
    print(f"\n| tree (median of {a.repeat}) | TTFT abs err p99 ms | send stretch µs/request | "
          "server read delay p99 ms | client stamp delay p99 ms |\n|---|---:|---:|---:|---:|")
    for name, figs in out.items():
        m = [statistics.median(f[k] for f in figs) for k in range(4)]
        print(f"| {name} | {m[0]:.2f} | {m[1]:.1f} | {m[2]:.2f} | {m[3]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
