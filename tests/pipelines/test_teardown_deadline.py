"""Teardown has a deadline no telemetry endpoint can break: the real chain on the local
profile (the emulator as a process, the load over loopback) with the deployment's telemetry
pointed at endpoints that trickle a body, trickle their headers, never answer, or send a
gzip bomb. The engine and the cluster are torn down within TEARDOWN_DEADLINE_S of the load's
end, and the run still succeeds."""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass, replace

import pytest
from servingbench.pipelines.profiles import Settings
from servingbench.resources.cluster.local import LocalHostCluster
from servingbench.resources.loadgen.generator import LoadGenerator
from servingbench.resources.model_server.local import LocalModelServers
from servingbench.resources.model_server.local.emulator import EmulatorModelServer
from servingbench.resources.telemetry import sampler

from tests.support.chain import run_job
from tests.support.telemetry import HostileTelemetry

# the sampler's bound (STOP_TIMEOUT_S, 5 s, shortened here to STOP_S: every hostile read
# at stop outlasts either), the emulator's SIGTERM grace (emulator/process.py) and slack for
# a busy test machine; without the bound a trickled header holds teardown forever
STOP_S = 2.0
TEARDOWN_DEADLINE_S = 7.0
EVENTS: dict[str, float] = {}


@dataclass(frozen=True)
class TimedLoad(LoadGenerator):
    def run(self, *args, **kwargs):
        try:
            return super().run(*args, **kwargs)
        finally:
            EVENTS["load_ended"] = time.monotonic()


class TimedCluster(LocalHostCluster):
    def teardown(self, info):
        EVENTS["cluster_teardown"] = time.monotonic()
        return super().teardown(info)


class HostileTelemetryServer(EmulatorModelServer):
    def __init__(self, specs: list[dict], **kw):
        super().__init__(**kw)
        self.specs = specs

    @contextlib.contextmanager
    def deploy(self, candidate, cluster, run_dir):
        with super().deploy(candidate, cluster, run_dir) as dep:
            EVENTS["engine_pid"] = dep.details["pid"]
            yield replace(dep, telemetry=self.specs)
        EVENTS["engine_stopped"] = time.monotonic()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.serial  # a wall-clock deadline: after the parallel pass, away from its load
@pytest.mark.timeout(240)
def test_teardown_runs_within_its_deadline_whatever_the_telemetry_endpoints_do(tmp_path,
                                                                              monkeypatch):
    EVENTS.clear()
    monkeypatch.setattr(sampler, "STOP_TIMEOUT_S", STOP_S)
    load = TimedLoad(concurrency=(1,), requests_per_step=4, warmup_requests=1,
                     output_tokens=8, input_tokens=32)
    settings = Settings(data_dir=tmp_path, time_scale=0.2, cold_start_s=0.2, load=load)
    with HostileTelemetry(gap_s=0.1) as bad:
        specs = bad.specs("/trickle", "/header-trickle", "/silent", "/gzip-bomb")
        resources = {"cluster": TimedCluster(),
                     "model_server": LocalModelServers(HostileTelemetryServer(
                         specs, time_scale=0.2, cold_start_s=0.2))}
        result, _ = run_job(tmp_path, settings=settings, resources=resources)
        hit = dict(bad.hits)
    assert result.success, [e.event_specific_data.error.message for e in result.all_events
                            if e.is_step_failure]
    # every hostile endpoint was read, and the header trickle was still being read at stop
    assert set(hit) >= {"/trickle", "/header-trickle"}
    assert {"load_ended", "engine_stopped", "cluster_teardown"} <= set(EVENTS)
    assert EVENTS["load_ended"] <= EVENTS["engine_stopped"] <= EVENTS["cluster_teardown"]
    gap = EVENTS["cluster_teardown"] - EVENTS["load_ended"]
    print(f"cluster teardown {gap:.2f} s after the load ended")  # shown with -s
    assert gap < TEARDOWN_DEADLINE_S
    assert gap >= STOP_S  # the sampler was stopped by its bound, a read still hanging
    assert sampler.STOP_TIMEOUT_S < TEARDOWN_DEADLINE_S
    assert _gone(EVENTS["engine_pid"])
    run_dir = next((tmp_path / "runs").iterdir())
    assert (run_dir / "telemetry.parquet").exists()  # what was sampled is kept
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["source"] == "emulated"
