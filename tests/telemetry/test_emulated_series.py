"""The emulator's modelled device state in DCGM names, read by the sampler from a real
emulator process over loopback while real requests run, and the chain with it."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import threading
import time

import httpx
import pyarrow.parquet as pq
import pytest
from servingbench.assets import telemetry as telemetry_link
from servingbench.emulator.process import EmulatorProcess
from servingbench.pipelines.profiles import Settings
from servingbench.resources.contract.timestamps import parse_ts
from servingbench.resources.loadgen.generator import LoadGenerator
from servingbench.resources.model_server.local.emulator import EmulatorModelServer
from servingbench.resources.telemetry import Sampler, sources_from

from tests.support.chain import materialized, run_job
from tests.support.emulator import SCOUT

pytestmark = pytest.mark.slow  # a chain, a job or processes: not in `make check`


def series(rows, device, metric):
    return [r["value"] for r in sorted(rows, key=lambda r: r["at"])
            if r["device"] == device and r["metric"] == metric]


def test_emulator_models_utilization_memory_power_and_energy(tmp_path):
    args = ["--candidate", "p5.48xlarge", "--model", "scout", "--precision", "bf16",
            "--cold-start-s", "0"]
    with EmulatorProcess(args) as emu:
        sampler = Sampler(tmp_path, "run-1", sources_from(
            [{"kind": "emulated", "url": f"{emu.base_url}/metrics"}]), interval_s=0.2).start()
        # "idle first": the first sample is taken before any request is sent (on a busy
        # machine the sampler's thread can start after the clients')
        deadline = time.monotonic() + 30
        while sampler.ticks < 1 and time.monotonic() < deadline:
            time.sleep(0.01)

        def client():
            with httpx.Client(timeout=30) as c:
                for _ in range(2):
                    c.post(f"{emu.base_url}/v1/completions",
                           json={"model": SCOUT, "prompt": "hi " * 500, "max_tokens": 150,
                                 "ignore_eos": True})
        threads = [threading.Thread(target=client) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        sampler.stop()
    rows = pq.read_table(tmp_path / "telemetry.parquet").to_pylist()
    assert {r["source"] for r in rows} == {"emulated"}
    assert {r["device"] for r in rows} == {f"gpu{i}" for i in range(8)} | {"engine"}
    util, power = series(rows, "gpu0", "accel_util"), series(rows, "gpu0", "power_w")
    energy, used = series(rows, "gpu0", "energy_j"), series(rows, "gpu0", "accel_mem_used_bytes")
    assert util[0] == 0.0 and max(util) >= 0.5          # idle first, then busy
    assert power[0] == 70.0 and max(power) > 400.0      # idle draw, then toward the 700 W limit
    assert all(b > a for a, b in zip(energy, energy[1:], strict=False))  # a counter
    assert max(used) > used[0]                          # the KV in use adds to the weights
    assert series(rows, "gpu0", "accel_mem_total_bytes")[0] == (80 * 10**9 // (1 << 20)) * (1 << 20)
    assert max(series(rows, "engine", "kv_cache_usage")) > 0.0
    assert max(series(rows, "engine", "requests_running")) >= 2


@dataclasses.dataclass
class ExtraTelemetry:
    """The emulator's model server, with one more telemetry source that is down."""
    inner: EmulatorModelServer
    extra: list

    def refuses(self, candidate):
        return self.inner.refuses(candidate)

    @contextlib.contextmanager
    def deploy(self, candidate, cluster, run_dir):
        with self.inner.deploy(candidate, cluster, run_dir) as dep:
            dep.telemetry = dep.telemetry + self.extra
            yield dep


def test_chain_samples_beside_the_load_and_a_dead_source_never_stops_it(tmp_path, monkeypatch):
    # the emulator 5x faster and the chain's sampler every 0.2 s instead of every 1 s: steps
    # of about a second, each holding several samples, as full-time steps hold 1 s ones
    monkeypatch.setattr(telemetry_link, "sampling",
                        functools.partial(telemetry_link.sampling, interval_s=0.2))
    load = LoadGenerator(concurrency=(1, 2), requests_per_step=6, warmup_requests=2,
                        output_tokens=200, input_tokens=64)
    settings = Settings(data_dir=tmp_path, time_scale=0.2, cold_start_s=0.2, load=load)
    dead = [{"kind": "dcgm", "url": "http://127.0.0.1:9/metrics"}]  # discard port: refused
    server = ExtraTelemetry(EmulatorModelServer(time_scale=0.2, cold_start_s=0.2), dead)
    result, _ = run_job(tmp_path, settings=settings, resources={"model_server": server})
    assert result.success, [e.event_specific_data.error.message for e in result.all_events
                            if e.is_step_failure]
    md = materialized(result)
    run_dir = tmp_path / "runs" / md["provisioned_cluster"]["run_dir"].rsplit("/", 1)[-1]
    rows = pq.read_table(run_dir / "telemetry.parquet").to_pylist()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    warm, steady = manifest["phases"]["warmup"], manifest["phases"]["steady"]
    ats = sorted(r["at"].value for r in rows if r["source"] == "emulated")  # epoch ns
    assert ats[0] <= parse_ts(warm["started_at"]) and ats[-1] >= parse_ts(steady["ended_at"])
    assert {r["value"] for r in rows if r["source"] == "dcgm"} == {None}  # only gaps
    tm = pq.read_table(run_dir / "telemetry_metrics.parquet").to_pylist()
    assert {r["step"] for r in tm} == {"c=1", "c=2"}
    assert {r["metric"] for r in tm} >= {"accel_util", "power_w", "energy_j",
                                         "energy_j_per_1m_output_tokens", "sample_error"}
    steady_md = md["steady_state_request_log"]
    assert "telemetry_steps" in steady_md and "c=2" in steady_md["telemetry_steps"]
