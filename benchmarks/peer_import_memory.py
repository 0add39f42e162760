"""Peak memory of `servingbench import` against the size of the peer's file: a synthetic
`vllm bench serve --save-detailed` result (the layout of tests/fixtures/peers/, `--tokens`
inter-token gaps per request, the request count chosen to reach each size), imported by the
real command in a process of its own; its peak RSS is the child's ru_maxrss. The ratio (peak
over file size, after the process's own start) is what sets the file cap a 4 GiB pod can
take (resources/peers/records.py MAX_FILE_BYTES).

    .venv/bin/python benchmarks/peer_import_memory.py [--sizes-mib 8,32,64] [--tokens 128] [--dense]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
from pathlib import Path


def vllm_result(path: Path, size: int, tokens: int, dense: bool = False) -> int:
    """Write a vLLM result of about `size` bytes, streamed (the file is never in memory
    whole); the number of requests in it. `dense`: every gap is `1.0`, the shortest text a
    float takes, so the most numbers per byte a hostile file of this shape can hold."""
    rng = random.Random(0)

    def gap() -> str:
        return "1.0" if dense else f"{rng.uniform(0.004, 0.02):.6f}"

    itls = "[" + ",".join(gap() for _ in range(tokens - 1)) + "]"
    per = len(itls) + 60  # the gaps and one entry in each other list
    n = max(1, size // per)
    head = {"date": "20261130-180000", "model_id": "m", "vllm_version": "0.33.0",
            "request_rate": "inf", "max_concurrency": 64, "completed": n, "failed": 0,
            "total_output_tokens": n * tokens}
    scalars = {"input_lens": lambda i: "512", "output_lens": lambda i: str(tokens),
               "ttfts": lambda i: f"{rng.uniform(0.02, 0.2):.6f}", "latencies": lambda i: "1.0",
               "start_times": lambda i: f"{1000.0 + i * 0.01:.4f}",
               "queue_times": lambda i: "0.0", "errors": lambda i: '""'}
    with open(path, "w") as f:
        f.write(json.dumps(head)[:-1])
        for key, value in scalars.items():
            f.write(f', "{key}": [' + ",".join(value(i) for i in range(n)) + "]")
        f.write(', "itls": [')
        for i in range(n):
            f.write(("," if i else "") + (itls if dense else
                                          "[" + ",".join(gap() for _ in range(tokens - 1)) + "]"))
        f.write("]}")
    return n


def peak_rss_mib(argv: list[str]) -> tuple[float, int]:
    """(the child's peak RSS in MiB, its exit status), the child run alone."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    done = subprocess.run(argv, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if done.returncode not in (0, 2):
        sys.exit(f"{argv}: exit {done.returncode}: {done.stderr[-2000:]}")
    return max(after, before) / 1024, done.returncode


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes-mib", default="8,32,64")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--dense", action="store_true", help="every gap `1.0`: the worst case")
    a = p.parse_args()
    exe = [sys.executable, "-m", "servingbench.pipelines.cli", "import", "vllm"]
    with tempfile.TemporaryDirectory() as tmp:
        tiny = Path(tmp) / "tiny.json"
        vllm_result(tiny, 4096, a.tokens)
        base, _ = peak_rss_mib([*exe, str(tiny), "--out", str(Path(tmp) / "tiny")])
        print(f"the command importing a 4 KiB file: {base:.0f} MiB")
        print("file MiB | requests | peak RSS MiB | exit | (peak - start) / file")
        for mib in (float(s) for s in a.sizes_mib.split(",")):
            src = Path(tmp) / f"r{mib:g}.json"
            n = vllm_result(src, int(mib * (1 << 20)), a.tokens, a.dense)
            size = src.stat().st_size / (1 << 20)
            # each size in a fresh child: ru_maxrss of the children is the largest so far
            code = subprocess.run(
                [sys.executable, "-c",
                 "import resource, subprocess, sys; d = subprocess.run(sys.argv[1:], "
                 "capture_output=True); print(resource.getrusage(resource.RUSAGE_CHILDREN)"
                 ".ru_maxrss, d.returncode)",
                 *exe, str(src), "--out", str(Path(tmp) / f"out{mib:g}")],
                capture_output=True, text=True, check=True).stdout.split()
            peak, rc = int(code[0]) / 1024, int(code[1])
            print(f"{size:8.1f} | {n:8,} | {peak:12.0f} | {rc:4} | {(peak - base) / size:5.1f}")
            src.unlink()


if __name__ == "__main__":
    main()
