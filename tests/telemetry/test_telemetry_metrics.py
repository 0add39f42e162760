"""contract §3.2 on a hand-computed fixture: per step × device × metric (mean, max, n) and
the energy per 1M output tokens, through the analyzer (sql/telemetry_metrics.sql)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.analysis.telemetry import step_summary

from tests.support.runbuilder import clean_run

# clean_run: one steady step c=2, window [1000, 1400] ms, output tokens 3 + 2 + 4 = 9.


def telemetry_run():
    b = clean_run()
    # gpu0 has the energy counter: its increase inside the window is 1250 − 1000 = 250 J
    # (the reading at 900 ms is outside; power_w is then ignored for gpu0).
    for ms, j in ((900, 100.0), (1000, 1000.0), (1200, 1100.0), (1400, 1250.0)):
        b.sample(ms, "gpu0", "energy_j", j)
    b.sample(1100, "gpu0", "power_w", 9999.0)
    # gpu1 only reports power: trapezoid (300+500)/2 × 0.1 s + (500+400)/2 × 0.3 s = 175 J.
    for ms, w in ((1000, 300.0), (1100, 500.0), (1400, 400.0), (1500, 1e6)):
        b.sample(ms, "gpu1", "power_w", w)
    b.sample(1000, "gpu0", "accel_util", 0.1)
    b.sample(1200, "gpu0", "accel_util", 0.3)
    b.sample(1000, "gpu0", "accel_mem_used_bytes", 70e9)
    b.sample(1300, "gpu0", "accel_mem_used_bytes", 78e9)
    b.sample(1300, "gpu0", "accel_mem_total_bytes", 80e9)
    b.sample(1100, "engine", "kv_cache_usage", 1.0, source="engine_metrics")
    b.sample(1300, "engine", "sample_error", None, source="engine_metrics")
    return b


def rows_by_key(run_dir):
    t = pq.read_table(run_dir / "telemetry_metrics.parquet").to_pylist()
    return {(r["step"], r["device"], r["metric"]): r for r in t}


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    """The hand-computed run analysed once (each analysis validates the folder with GX, a
    second or more of CPU): three tests read different parts of the same outputs."""
    run_dir = telemetry_run().write(tmp_path_factory.mktemp("telemetry") / "run")
    return run_dir, analyze_run(run_dir)


def test_energy_per_1m_output_tokens_hand_computed(analysed):
    run_dir, result = analysed
    assert result.exit_code == 0, result.message
    rows = rows_by_key(run_dir)
    energy = rows[("c=2", "all", "energy_j_per_1m_output_tokens")]
    assert energy["mean"] == pytest.approx((250.0 + 175.0) / 9 * 1e6, rel=1e-12)
    assert energy["max"] is None
    assert energy["n"] == 3 + 3  # gpu0's three counter readings, gpu1's three power readings
    assert energy["source"] == "dcgm"


def test_per_device_mean_max_n(analysed):
    run_dir, _ = analysed
    rows = rows_by_key(run_dir)
    util = rows[("c=2", "gpu0", "accel_util")]
    assert (util["mean"], util["max"], util["n"]) == (pytest.approx(0.2), 0.3, 2)
    power = rows[("c=2", "gpu1", "power_w")]  # 1500 ms is outside the window
    assert (power["mean"], power["max"], power["n"]) == (pytest.approx(400.0), 500.0, 3)
    gap = rows[("c=2", "engine", "sample_error")]
    assert (gap["mean"], gap["max"], gap["n"], gap["source"]) == (None, None, 1, "engine_metrics")
    assert rows[("c=2", "gpu0", "energy_j")]["n"] == 3
    assert all(r["run_id"] == "run-1" for r in rows.values())


def test_flags_kv_full_and_headroom(analysed):
    _, result = analysed
    s = step_summary(result.telemetry)[0]
    assert s["mem_headroom_min"] == pytest.approx(1 - 78 / 80)
    assert s["mem_used_max_bytes"] == 78e9
    assert s["sample_errors"] == 1
    assert s["energy_j_per_1m"] == pytest.approx(425 / 9 * 1e6, rel=1e-12)
    assert [f.split(" ")[0] for f in s["flags"]] == ["KV", "memory"]


def test_low_utilization_flag(tmp_path):
    b = clean_run()
    b.sample(1000, "gpu0", "accel_util", 0.05)
    b.sample(1200, "gpu0", "accel_util", 0.25)
    b.sample(1100, "gpu1", "accel_util", 0.1)
    s = step_summary(analyze_run(b.write(tmp_path / "run")).telemetry)[0]
    assert s["flags"] == ["utilization under 20% (client- or config-limited)"]
    b.sample(1300, "gpu1", "accel_util", 0.9)  # one device busy: not client-limited
    s = step_summary(analyze_run(b.write(tmp_path / "run2")).telemetry)[0]
    assert s["flags"] == []


def test_energy_left_out_rather_than_understated(tmp_path):
    b = clean_run()
    b.sample(1000, "gpu0", "power_w", 300.0)
    b.sample(1400, "gpu0", "power_w", 300.0)
    b.sample(1200, "gpu1", "power_w", 300.0)  # one reading: gpu1's energy is unknown
    run_dir = b.write(tmp_path / "run")
    analyze_run(run_dir)
    assert ("c=2", "all", "energy_j_per_1m_output_tokens") not in rows_by_key(run_dir)


def test_no_power_no_energy_row_and_no_telemetry_no_file(tmp_path):
    b = clean_run()
    b.sample(1000, "gpu0", "accel_util", 0.5)
    run_dir = b.write(tmp_path / "run")
    analyze_run(run_dir)
    assert {k[2] for k in rows_by_key(run_dir)} == {"accel_util"}
    bare = clean_run().write(tmp_path / "bare")
    assert analyze_run(bare).telemetry is None
    assert not (bare / "telemetry_metrics.parquet").exists()


def test_malformed_telemetry_is_exit_2_naming_the_file(tmp_path):
    import pyarrow as pa

    run_dir = clean_run().write(tmp_path / "run")
    pq.write_table(pa.table({"run_id": ["run-1"], "at": [1], "sorce": ["dcgm"]}),
                   run_dir / "telemetry.parquet")
    result = analyze_run(run_dir)
    assert result.exit_code == 2
    assert "telemetry.parquet" in result.message and "'at'" in result.message
    assert not (run_dir / "telemetry_metrics.parquet").exists()
