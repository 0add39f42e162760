"""What HAProxy adds: TTFT and ITL of the same load, straight to the server and through the
balancer (resources/model_server/fleet/balancer.py, the replicas' HAProxy on loopback), side by
side in one run, alternating.

The server is benchmarks/fixed_server.py (fixed TTFT 20 ms, ITL 5 ms: it keeps its
deadlines, so what moves is the path). The client is servingbench's load generator,
closed loop c=4, 64 tokens per request. Printed per round and path: TTFT and ITL p50 / p99
(ms) from the request and chunk logs, and the balancer's added p50 (goal < 0.2 ms).

    .venv/bin/python benchmarks/balancer_overhead.py [--rounds 3] [--requests 200]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchstats import pct  # noqa: E402


def measure(base_url: str, run_dir: Path, requests: int, c: int) -> tuple[list[float], list[float]]:
    from servingbench.resources.contract.schemas import read_records
    from servingbench.resources.loadgen import LoadConfig, run_load

    cfg = LoadConfig(endpoint=base_url, model="fixed", concurrency=[c], requests_per_step=requests,
                     warmup_requests=8, input_tokens=64, output_tokens=64, use_tokenize=False)
    run_load(cfg, run_dir, progress=False)
    log = read_records(run_dir, "steady_state_request_log").to_pylist()
    ttft = [(r["first_token_at"].value - r["sent_at"].value) / 1e6 for r in log
            if r["status"] == "ok"]
    ids = {r["request_id"] for r in log}
    by_req: dict[str, list[int]] = {}
    for ch in read_records(run_dir, "chunk_log").to_pylist():
        if ch["request_id"] in ids:
            by_req.setdefault(ch["request_id"], []).append(ch["at"].value)
    itl = [(b - a) / 1e6 for ats in by_req.values() for a, b in zip(sorted(ats), sorted(ats)[1:],
                                                                      strict=False)]
    return ttft, itl


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--c", type=int, default=4)
    a = ap.parse_args(argv)
    from servingbench.resources.model_server.fleet.balancer import Balancer

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
            with Balancer() as lb:
                lb.add("r0", port)
                paths = {"direct": f"http://127.0.0.1:{port}", "haproxy": lb.base_url}
                added = []
                for rnd in range(a.rounds):
                    p50 = {}
                    for name, url in paths.items():
                        ttft, itl = measure(url, Path(tmp) / f"{name}{rnd}", a.requests, a.c)
                        p50[name] = (pct(ttft, 0.5), pct(itl, 0.5))
                        print(f"round {rnd} {name:>7}: TTFT p50 {pct(ttft, 0.5):.3f} ms, p99 "
                              f"{pct(ttft, 0.99):.3f} ms; ITL p50 {pct(itl, 0.5):.3f} ms, p99 "
                              f"{pct(itl, 0.99):.3f} ms (n={len(ttft)} requests, "
                              f"{len(itl)} gaps)", flush=True)
                    d_ttft = p50["haproxy"][0] - p50["direct"][0]
                    d_itl = p50["haproxy"][1] - p50["direct"][1]
                    added.append((d_ttft, d_itl))
                    print(f"round {rnd}: HAProxy adds TTFT p50 {d_ttft:+.3f} ms, ITL p50 "
                          f"{d_itl:+.3f} ms (goal < 0.2 ms)", flush=True)
                print(f"median over rounds: TTFT {sorted(d for d, _ in added)[len(added) // 2]:+.3f} ms,"
                      f" ITL {sorted(d for _, d in added)[len(added) // 2]:+.3f} ms")
        finally:
            server.terminate()
            server.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
