"""`make bench`: every benchmark, one after the other (they share 2 cores; never in parallel).

    .venv/bin/python benchmarks/run.py [--quick] [--only NAME[,NAME]]

Each benchmark prints its own figures; `docs/performance.md` records them with the command
that produced them. Compare ratios within one run: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name -> (full arguments, --quick arguments)
BENCHMARKS = {
    "analyze_scale": (["--sizes", "10000:128,100000:128,1000000:128", "--steps", "64",
                       "--pandas-max", "0"], ["--sizes", "10000:128", "--steps", "64"]),
    "analyze_startup": (["--repeat", "3"], ["--repeat", "1"]),
    "gx_validate": (["--reps", "5"], ["--reps", "2", "--calls", "5"]),
    "loop_stalls": (["--repeat", "2"], ["--repeat", "1", "--count", "256"]),
    "emulator_throughput": (["--suite", "3", "--seconds", "4"], ["--streams", "64", "--seconds", "2"]),
    "loadgen_accuracy": (["--repeat", "3"], ["--quick"]),
    "loadgen_round": (["--repeat", "6"], ["--repeat", "2"]),
    "recorder_flush": (["--rounds", "200"], ["--rounds", "40"]),
    "schedule_lag": (["--rounds", "3"], ["--rounds", "1", "--scale", "0.5"]),
    "balancer_overhead": (["--rounds", "3"], ["--rounds", "1", "--requests", "100"]),
    "telemetry_overhead": (["--repeat", "3"], ["--repeat", "1", "--requests", "64"]),
    "report": (["--requests-per-slot", "1000", "--repeat", "3"],
               ["--requests-per-slot", "100", "--repeat", "1"]),
    "peer_import_memory": (["--sizes-mib", "32,64"], ["--sizes-mib", "8"]),
    # the peers `make peers` installed (a missing one is skipped, named): docs/import.md
    "peers_side_by_side": ([], ["--requests", "16"]),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes, a minute or two each")
    p.add_argument("--only", default=",".join(BENCHMARKS), help="comma list of benchmarks")
    args = p.parse_args(argv)
    names = args.only.split(",")
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark {unknown[0]!r}; known: {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    failed = []
    for name in names:
        extra = BENCHMARKS[name][1 if args.quick else 0]
        cmd = [sys.executable, str(HERE / f"{name}.py"), *extra]
        print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.monotonic()
        rc = subprocess.run(cmd, cwd=HERE.parent).returncode
        print(f"=== {name}: exit {rc} in {time.monotonic() - t0:.0f} s", flush=True)
        if rc:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
