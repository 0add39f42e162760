"""A process that starts everything a local run starts on this host, then waits to be killed:

    python -m tests.support.orphans OUT_DIR [--llamacpp MODEL.gguf]

HAProxy (the replicas' balancer), two emulator replicas, the swap driver's process, a program
that cannot watch its parent under the guard (as HAProxy and the Dagster daemon run), and,
with --llamacpp, a real llama.cpp server. When all are up it writes OUT_DIR/ready and sleeps;
the test kills it with SIGKILL (as an OOM kill or pytest-timeout would) and then looks for
any of its descendants (tests/hostile/test_no_orphans.py)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--llamacpp")
    a = p.parse_args(argv)
    from servingbench.emulator.process import EmulatorProcess
    from servingbench.resources.model_server.fleet.balancer import Balancer
    from servingbench.resources.model_server.swap.process import SwapProcess

    from tests.support.emulator import fixed_timing_args

    run_dir = a.out / "run"
    run_dir.mkdir(parents=True)
    with contextlib.ExitStack() as stack:
        lb = stack.enter_context(Balancer())
        ports = []
        for name in ("r0", "r1"):
            emu = stack.enter_context(EmulatorProcess(
                fixed_timing_args(5, 5, run_dir / f"gt.{name}.jsonl")))
            lb.add(name, emu.port)
            ports.append(emu.port)
        models = [{"name": n, "model": "m", "precision": "bf16", "placement": "swapped",
                   "memory_share": 0.5, "request_share": 0.5, "sleep_level": 1}
                  for n in ("a", "b")]
        swap = SwapProcess(models, None, run_dir, "run-1",
                           upstreams={"a": ("127.0.0.1", ports[0]), "b": ("127.0.0.1", ports[1])})
        swap.start()
        stack.callback(swap.stop)
        try:  # the guard (absent before it existed: that case is then not started)
            from servingbench.resources.model_server.child import ChildProcess

            stack.enter_context(ChildProcess(["sleep", "600"], name="sleep", guard=True))
        except ImportError:
            pass
        if a.llamacpp:
            from servingbench.resources.model_server.local.llamacpp import LlamaCppProcess

            stack.enter_context(LlamaCppProcess(
                ["--model", a.llamacpp, "--n_ctx", "256", "--n_threads", "1"]))
        (a.out / "ready").write_text("ready")
        time.sleep(600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
