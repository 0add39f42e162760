"""The sampler against fake DCGM exporter and neuron-monitor endpoints on loopback (replayed
recorded-format samples), a real child process for host usage, and a source taken away
mid-step."""

from __future__ import annotations

import re
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from servingbench.resources.telemetry import Sampler, sources_from

from tests.support.telemetry import (
    MIB,
    HostileTelemetry,
    fake_dcgm,
    fake_neuron_monitor,
    neuron_report,
    wait_for,
)

GPU_A = [{"util": 42, "fb_used": 61440, "fb_free": 20000, "power": 512.5, "energy_mj": 123456789},
         {"util": 0, "fb_used": 61000, "fb_free": 20440, "power": 88.25, "energy_mj": 987654321}]
GPU_B = [{"util": 97, "fb_used": 79000, "fb_free": 2440, "power": 690.0, "energy_mj": 123999789},
         {"util": 3, "fb_used": 61000, "fb_free": 20440, "power": 90.0, "energy_mj": 987700321}]
CORE_MEM = {"constants": 193986816, "model_code": 176285056, "model_shared_scratchpad": 0,
            "runtime_memory": 0, "tensors": 20971520}


def rows_of(run_dir):
    return pq.read_table(run_dir / "telemetry.parquet").to_pylist()


def first_tick(rows, source):
    mine = [r for r in rows if r["source"] == source]
    t0 = min(r["at"] for r in mine)
    return {(r["device"], r["metric"]): r["value"] for r in mine if r["at"] == t0}


def test_dcgm_exporter_fields_map_to_contract_names_and_units(tmp_path):
    with fake_dcgm([GPU_A, GPU_B]) as dcgm:
        sampler = Sampler(tmp_path, "run-1", sources_from([{"kind": "dcgm", "url": dcgm.url}]),
                          interval_s=0.05).start()
        assert wait_for(lambda: dcgm.served >= 3)
        sampler.stop()
    rows = rows_of(tmp_path)
    assert {r["run_id"] for r in rows} == {"run-1"} and {r["source"] for r in rows} == {"dcgm"}
    assert first_tick(rows, "dcgm") == {
        ("gpu0", "accel_util"): 0.42, ("gpu1", "accel_util"): 0.0,
        ("gpu0", "accel_mem_used_bytes"): 61440 * MIB, ("gpu1", "accel_mem_used_bytes"): 61000 * MIB,
        ("gpu0", "accel_mem_total_bytes"): (61440 + 20000) * MIB,
        ("gpu1", "accel_mem_total_bytes"): (61000 + 20440) * MIB,
        ("gpu0", "power_w"): 512.5, ("gpu1", "power_w"): 88.25,
        ("gpu0", "energy_j"): 123456.789, ("gpu1", "energy_j"): 987654.321,
    }
    later = [r for r in rows if r["device"] == "gpu0" and r["metric"] == "accel_util"]
    assert [r["value"] for r in later][:2] == [0.42, 0.97]  # the replay, in order
    assert not (tmp_path / "telemetry.partial.arrows").exists()


def test_neuron_monitor_report_maps_per_core_and_device_memory(tmp_path):
    report = neuron_report({0: (42.01, CORE_MEM), 1: (63.5, CORE_MEM)}, device_used=12519788544)
    with fake_neuron_monitor([report]) as nm:
        sampler = Sampler(tmp_path, "run-1",
                          sources_from([{"kind": "neuron_monitor", "url": nm.url}]),
                          interval_s=0.05).start()
        assert wait_for(lambda: nm.served >= 2)
        sampler.stop()
    per_core = sum(CORE_MEM.values())
    assert first_tick(rows_of(tmp_path), "neuron_monitor") == {
        ("nc0", "accel_util"): pytest.approx(0.4201), ("nc1", "accel_util"): 0.635,
        ("nc0", "accel_mem_used_bytes"): per_core, ("nc1", "accel_mem_used_bytes"): per_core,
        ("neuron", "accel_mem_used_bytes"): 12519788544,
        ("neuron", "accel_mem_total_bytes"): 12 * 32 * 1024**3,
    }


def test_a_source_lost_mid_step_leaves_gaps_and_sampling_goes_on(tmp_path):
    report = neuron_report({0: (50.0, CORE_MEM)}, device_used=10**9)
    with fake_dcgm([GPU_A]) as dcgm, fake_neuron_monitor([report]) as nm:
        sampler = Sampler(tmp_path, "run-1", sources_from(
            [{"kind": "dcgm", "url": dcgm.url}, {"kind": "neuron_monitor", "url": nm.url}],
            timeout_s=0.3), interval_s=0.05).start()
        assert wait_for(lambda: dcgm.served >= 2)
        dcgm.fail = True                      # the exporter answers 503
        assert wait_for(lambda: sampler.errors >= 2)
        dcgm.fail, dcgm.hang_s = False, 2.0   # then answers too late
        assert wait_for(lambda: sampler.errors >= 3)
        dcgm.hang_s = 0.0                     # then comes back
        served = dcgm.served
        assert wait_for(lambda: dcgm.served >= served + 2)
        sampler.stop()
    rows = rows_of(tmp_path)
    gaps = [r for r in rows if r["metric"] == "sample_error"]
    assert len(gaps) >= 3
    assert {(r["source"], r["device"], r["value"]) for r in gaps} == {("dcgm", "all", None)}
    first_gap, last_gap = min(r["at"] for r in gaps), max(r["at"] for r in gaps)
    dcgm_ok = [r["at"] for r in rows if r["source"] == "dcgm" and r["metric"] != "sample_error"]
    neuron_ok = [r["at"] for r in rows if r["source"] == "neuron_monitor"]
    assert min(dcgm_ok) < first_gap and max(dcgm_ok) > last_gap  # before, and after recovery
    assert any(first_gap <= t <= last_gap for t in neuron_ok)    # the other source went on
    assert "dcgm" in sampler.summary()["last_error"]


def test_host_usage_of_a_real_engine_process_and_its_death(tmp_path):
    child = subprocess.Popen([sys.executable, "-c",
                              "import time\nx = bytearray(64 << 20)\nprint('ready', flush=True)\n"
                              "t = time.time()\nwhile time.time() - t < 60: pass"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"  # its memory is held, its loop is spinning
        sampler = Sampler(tmp_path, "run-1", sources_from([{"kind": "host", "pid": child.pid}]),
                          interval_s=0.1).start()
        assert wait_for(lambda: sampler.ticks >= 4)
        child.kill()
        child.wait(timeout=10)
        assert wait_for(lambda: sampler.errors >= 1)
        sampler.stop()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
    rows = rows_of(tmp_path)
    cpu = [r["value"] for r in rows if r["metric"] == "host_cpu_util"]
    mem = [r["value"] for r in rows if r["metric"] == "host_mem_used_bytes"]
    assert max(cpu) > 0.0 and all(0.0 <= v <= 1.0 for v in cpu)  # a busy loop is busy
    assert min(mem) >= 64 << 20                                    # it holds its 64 MiB
    assert {r["source"] for r in rows} == {"host"}
    assert [r["value"] for r in rows if r["metric"] == "sample_error"][:1] == [None]


def test_unknown_source_kind_and_bad_interval_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="kind 'nvml'"):
        sources_from([{"kind": "nvml"}])
    with pytest.raises(ValueError, match="interval"):
        Sampler(tmp_path, "run-1", [], interval_s=0)


def test_credentials_in_a_source_url_never_reach_the_error_text(tmp_path):
    with fake_dcgm([GPU_A]) as dcgm:
        dcgm.fail = True  # the error names the URL it read
        url = dcgm.url.replace("http://", "http://scraper:s3cret-token@") + "/metrics"
        sampler = Sampler(tmp_path, "run-1", sources_from([{"kind": "dcgm", "url": url}]),
                          interval_s=0.05).start()
        assert wait_for(lambda: sampler.errors >= 1)
        sampler.stop()
    assert "HTTP 503" in sampler.summary()["last_error"]
    assert "s3cret-token" not in sampler.summary()["last_error"]
    assert not any("s3cret" in str(v) for r in rows_of(tmp_path) for v in r.values())


@pytest.mark.parametrize(("path", "why"), [("/trickle", "no complete answer within"),
                                           # the read's deadline, or its read timeout:
                                           # both are the source's timeout_s
                                           ("/silent", "no complete answer within|ReadTimeout"),
                                           ("/gzip-bomb", "gzip-encoded answer")])
def test_a_hostile_exporter_costs_a_bounded_read_per_tick(tmp_path, path, why):
    """A body trickled forever, no answer at all, or a gzip bomb: each tick is a gap of at
    most the source's deadline, the bomb is never inflated, and stop() finishes normally."""
    with HostileTelemetry() as bad:
        sampler = Sampler(tmp_path, "run-1", sources_from(bad.specs(path), timeout_s=0.5),
                          interval_s=0.1).start()
        assert wait_for(lambda: sampler.errors >= 3)
        sampler.stop()
    assert sampler.abandoned is False
    assert re.search(why, sampler.summary()["last_error"])
    gaps = [r for r in rows_of(tmp_path) if r["metric"] == "sample_error"]
    assert len(gaps) >= 3 and {r["source"] for r in gaps} == {"emulated"}


def test_stop_is_bounded_when_a_read_never_ends(tmp_path):
    """Headers trickled one byte at a time keep a read alive with no read timeout firing,
    here until the source's 30 s deadline (tests/hostile/test_control_deadline.py shows the
    deadline ends it): stop() gives up on the loop after its own bound and still writes a
    readable file."""
    with HostileTelemetry() as bad:
        sampler = Sampler(tmp_path, "run-1", sources_from(bad.specs("/header-trickle"),
                                                          timeout_s=30), interval_s=0.05).start()
        assert wait_for(lambda: bad.hits.get("/header-trickle", 0) >= 1)
        assert sampler.stop(timeout_s=0.5) == tmp_path / "telemetry.parquet"
        assert sampler.abandoned is True
        assert "read still running" in sampler.summary()["last_error"]
        ticks = sampler.ticks
        sampler.tick()  # what the abandoned loop would do next: nothing is written
        assert sampler.ticks == ticks
    assert not (tmp_path / "telemetry.partial.arrows").exists()
    assert rows_of(tmp_path) == []  # the one tick never finished: nothing half-written


def test_the_partial_file_is_created_exclusively(tmp_path):
    (tmp_path / "telemetry.partial.arrows").write_bytes(b"another sampler's ticks")
    with pytest.raises(FileExistsError):
        Sampler(tmp_path, "run-1", []).start()
    assert (tmp_path / "telemetry.partial.arrows").read_bytes() == b"another sampler's ticks"
