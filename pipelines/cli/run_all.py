"""`servingbench run --all`: every candidate as its own `servingbench run --candidate` process,
at most N at once, on one Dagster instance.

A process per run, like the Kubernetes run launcher's pod per run: a run that crashes takes
nobody else with it, and the concurrency pools (held in the instance's storage) are what
keep two runs of one pool apart, exactly as they do on the cluster.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from servingbench.assets.pools import sync_limit

POLL_S = 0.5
TAIL_LINES = 3


def run_all(candidates: dict, date: str, parallel: int, instance) -> int:
    # the file's limits are in place before any worker claims a slot
    for pool, limit in sorted({(c.pool, c.pool_limit) for c in candidates.values() if c.pool}):
        sync_limit(instance, pool, limit)
    names = list(candidates)
    pools = ", ".join(sorted({f"{c.pool}: {c.pool_limit}" for c in candidates.values()
                              if c.pool})) or "none"
    print(f"{len(names)} candidates for {date}, {parallel} at once; pools {pools}", flush=True)
    waiting, running, results, t0 = list(names), {}, {}, time.monotonic()
    with tempfile.TemporaryDirectory(prefix="servingbench-run-all-") as logs:
        while waiting or running:
            while waiting and len(running) < parallel:
                name = waiting.pop(0)
                log = Path(logs) / f"{name}.log"
                with open(log, "wb") as out:
                    running[name] = (subprocess.Popen(
                        [sys.executable, "-m", "servingbench.pipelines.cli", "run", "--candidate", name,
                         "--date", date], stdout=out, stderr=subprocess.STDOUT), log)
                print(f"  started {name}", flush=True)
            for name, (proc, log) in list(running.items()):
                if proc.poll() is None:
                    continue
                del running[name]
                results[name] = proc.returncode
                tail = log.read_text(errors="replace").strip().splitlines()[-TAIL_LINES:]
                status = "done" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
                print(f"  {status}: {name}\n" + "\n".join(f"    {line}" for line in tail),
                      flush=True)
            if running:
                time.sleep(POLL_S)
    failed = [n for n, rc in results.items() if rc != 0]
    print(f"{len(names) - len(failed)} of {len(names)} candidates in "
          f"{time.monotonic() - t0:.0f} s" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0
