"""CPU seconds of each test file of the suite, every process it starts included (servers,
chains, the peers, vLLM, Chromium), however its processes are started and re-parented: each
test runs in a cpuacct cgroup of its own (Linux cgroup v1, as root), which its xdist worker
moves into before the test's setup and out of after its teardown; whatever the test starts
stays in that group and is counted there until it ends. A module's server started in its
first test's setup is counted with that test, so compare files, not single tests.

    .venv/bin/python benchmarks/suite_cpu.py [PYTEST ARGS ...]
    (default: the parallel pass, -m "not serial" -n 4 --dist loadfile --no-loadscope-reorder)

Prints the files by CPU seconds (share, cumulative share) and writes
benchmarks/out/suite_cpu.json. The suite's wall time on 2 cores follows its CPU seconds: the
parallel pass keeps both cores busy (CPU ÷ wall ≈ 1.9–2.0), so a test's cost to the suite is
its CPU, not its duration under contention. Also run with HOME and TMPDIR pointing at empty
folders (SERVINGBENCH_CACHE_DIR and SERVINGBENCH_PEERS kept) for what a new machine's empty
caches cost.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

CGROOT = "/sys/fs/cgroup/cpuacct"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT = ["-m", "not serial", "-n", "4", "--dist", "loadfile", "--no-loadscope-reorder"]


# --- the pytest plugin (loaded in every worker with -p suite_cpu) -------------------------

_state: dict = {"n": 0, "tests": []}


def _base() -> str:
    return f"{CGROOT}/suite-cpu-{os.getpid()}"


def _move(path: str) -> None:
    with open(f"{path}/cgroup.procs", "w") as f:
        f.write(str(os.getpid()))


def pytest_configure(config):
    os.makedirs(_base(), exist_ok=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _state["n"] += 1
    cg = f"{_base()}/t{_state['n']}"
    os.mkdir(cg)
    _move(cg)
    t0 = time.monotonic()
    yield
    _move(_base())
    _state["tests"].append((item.nodeid, cg, time.monotonic() - t0))


def pytest_sessionfinish(session):
    out = []
    for nodeid, cg, wall in _state["tests"]:
        with open(f"{cg}/cpuacct.usage") as f:
            out.append({"test": nodeid, "cpu_s": int(f.read()) / 1e9, "wall_s": wall})
        with open(f"{cg}/cgroup.procs") as f:
            for pid in f.read().split():  # still running: counted so far, moved out
                with open(f"{CGROOT}/cgroup.procs", "w") as root:
                    root.write(pid)
        os.rmdir(cg)
    with open(os.environ["SUITE_CPU_OUT"] + f"/{os.getpid()}.json", "w") as f:
        json.dump(out, f)
    _move(CGROOT)
    os.rmdir(_base())


# --- the driver ---------------------------------------------------------------------------

def main(argv: list[str]) -> int:
    if not os.access(f"{CGROOT}/cgroup.procs", os.W_OK):
        print(f"{CGROOT} is not writable here (cgroup v1's cpuacct, as root)", file=sys.stderr)
        return 2
    out = Path(tempfile.mkdtemp(prefix="suite-cpu-"))
    env = {**os.environ, "SUITE_CPU_OUT": str(out),
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    t0 = time.monotonic()
    rc = subprocess.run([sys.executable, "-m", "pytest", "-p", "suite_cpu", "-q",
                         *(argv or DEFAULT)], cwd=ROOT, env=env).returncode
    wall = time.monotonic() - t0
    rows = [r for f in glob.glob(str(out / "*.json")) for r in json.loads(Path(f).read_text())]
    per, n = collections.Counter(), collections.Counter()
    for r in rows:
        per[r["test"].split("::")[0]] += r["cpu_s"]
        n[r["test"].split("::")[0]] += 1
    total = sum(per.values())
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "suite_cpu.json").write_text(json.dumps(
        {"wall_s": wall, "cpu_s": total, "tests": rows}, indent=1))
    print(f"\n{len(rows)} tests, {total:.0f} CPU-s in {wall:.0f} s (pytest exit {rc})\n")
    print("| file | tests | CPU s | share | cumulative |\n|---|---:|---:|---:|---:|")
    acc = 0.0
    for f, cpu in per.most_common(30):
        acc += cpu
        print(f"| {f} | {n[f]} | {cpu:.1f} | {cpu / total:.1%} | {acc / total:.0%} |")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
