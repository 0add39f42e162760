"""Real vLLM's CPU build in the tests (`make engine-vllm`). A start costs about a minute of
both cores, so a test module starts one server through the model server itself
(VllmModelServer.deploy) and shares it: its protocol tests ask it directly, and its chain
run is handed the running server by `Running`, which deploys nothing (the start, the stop
and what is left after them are the module fixture's to check)."""

from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from pathlib import Path

from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.config import REAL_FILE
from servingbench.resources.contract import durable
from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.contract.timestamps import format_ts
from servingbench.resources.model_server.interface import Deployment, ModelServer
from servingbench.resources.model_server.local.vllm_cpu import engine_available

WHY = engine_available()
NAME = "local-vllm-tiny"  # pipelines/candidates_real.yaml
# Every vLLM the tests start runs eagerly: without it, its first forward pass compiles the
# model (torch.compile and Inductor's C++ kernels), once for each shape of configuration,
# into caches under HOME and the temporary folder. On a new machine those caches are empty:
# the two vLLM files cost 155 CPU-seconds there, 107 eagerly. Nothing the tests check (the
# API, the metrics, the counters, the process group's life and death) depends on it. The
# price, on a machine whose caches are warm: eager steps cost more CPU when the cores are
# contended (the live module under two busy loops: 68 CPU-s against 51 compiled), and its
# slower tokens are what keep test_vllm_live's four requests overlapping long enough to
# outgrow the KV cache (compiled, that test failed under the parallel pass's load).
# docs/performance.md ("The test suite").
EAGER = ("--enforce-eager",)


def candidate() -> Candidate:
    return {c.name: c for c in load_candidates(REAL_FILE)}[NAME]


class Running(ModelServer):
    """Hands a chain run the module's running server (its Deployment, deploy taking no
    time), for a candidate serving the same model; refuses any other."""

    def __init__(self, dep: Deployment, run_dir: Path):
        self.dep, self.started_dir = dep, run_dir

    @contextlib.contextmanager
    def deploy(self, candidate: Candidate, cluster, run_dir: Path):
        assert candidate.model == self.dep.served_model, candidate.model
        now = format_ts(time.time_ns())
        durable.write_bytes(Path(run_dir) / "deployment.json",
                            (self.started_dir / "deployment.json").read_bytes())
        yield replace(self.dep, phases={"deploy": {"started_at": now, "ended_at": now}})
