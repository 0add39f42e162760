"""contract §3's SLO attainment, slow-tail interactivity and replicas per step, on runs worked
out by hand (times in ms after T0, see tests/support/runbuilder.py), for every run, with and
without events, and on a folder written before the optional columns existed."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from servingbench.resources.analysis.analyze import analyze_run

from tests.support.runbuilder import RunBuilder


def four_requests(**fields) -> RunBuilder:
    """Step rate=2, window [1000, 5000] ms (4 s):
      A ok, TTFT 0.1 s, 3 tokens, TPOT 0.05 s, e2e 0.3 s       -> within the SLO, 0.1 s/token
      B http_error, finished 1500                               -> counts, never within
      C ok, TTFT 2.5 s (> 2 s), 2 tokens, e2e 2.6 s             -> missed, 1.3 s/token
      D ok, 1 token (no TPOT), TTFT 0.2 s, e2e 0.2 s, ends 5000 -> within, 0.2 s/token
    """
    b = RunBuilder(**fields)
    b.request("rate=2", sent=1000, chunks=[(1100, 1), (1150, 1), (1200, 1)], finished=1300)
    b.request("rate=2", sent=1200, finished=1500, status="http_error", http_status=503)
    b.request("rate=2", sent=2000, chunks=[(4500, 1), (4550, 1)], finished=4600)
    b.request("rate=2", sent=4800, chunks=[(5000, 1)], finished=5000)
    b.hourly_bill()
    return b


def only_row(result) -> dict:
    assert result.exit_code == 0, (result.message, result.gates)
    (row,) = result.metrics.to_pylist()
    return row


def test_attainment_counts_failures_and_interactivity_is_the_slow_tail(tmp_path):
    row = only_row(analyze_run(four_requests().write(tmp_path / "run")))
    assert row["n_requests"] == 4 and row["window_s"] == 4.0
    assert row["slo_attainment"] == 2 / 4   # A and D of four; B's failure is in the denominator
    # seconds per token over OK: 0.1, 1.3, 0.2 → sorted p90 at position 1.8: 0.2 + 0.8 × 1.1
    assert row["e2e_norm_interactivity_tok_s"] == pytest.approx(1 / (0.2 + 0.8 * 1.1))
    # one fixed replica without events or `replicas`
    assert row["replicas_mean"] == 1.0
    assert row["output_tok_s_per_replica"] == row["output_tok_s"] == 6 / 4.0
    # a stricter SLO (TTFT ≤ 0.15 s): only A
    strict = only_row(analyze_run(tmp_path / "run", slos=[(0.15, 0.1)]))
    assert strict["slo_attainment"] == 1 / 4


def test_replicas_mean_is_the_time_weighted_count_from_the_events(tmp_path):
    b = four_requests(replicas={"min": 1, "max": 3, "initial": 1})
    b.replica_up("r0", -5000, -1000)            # up before the window
    b.replica_up("r1", 1500, 2000)              # ready 2000 ...
    b.event("replica_stopped", "r1", 4000)      # ... to 4000: 2 s of the 4 s window
    b.replica_up("r2", 5500, 6000)              # after the window: not counted
    row = only_row(analyze_run(b.write(tmp_path / "run")))
    assert row["replicas_mean"] == pytest.approx((4 + 2) / 4)
    assert row["output_tok_s_per_replica"] == pytest.approx(1.5 / 1.5)


def test_a_fixed_replica_count_without_events_is_replicas_initial(tmp_path):
    b = four_requests(replicas={"min": 2, "max": 2, "initial": 2})
    row = only_row(analyze_run(b.write(tmp_path / "run")))
    assert row["replicas_mean"] == 2.0 and row["output_tok_s_per_replica"] == 1.5 / 2


def test_events_of_another_run_fail_rule_3_and_are_ignored(tmp_path):
    b = four_requests(replicas={"min": 1, "max": 3, "initial": 1})
    b.replica_up("r0", -5000, -1000)
    b.event("replica_ready", "x9", 1000, run_id="another-run")
    result = analyze_run(b.write(tmp_path / "run"))
    assert result.exit_code == 3
    rule3 = result.gates[2]
    assert (rule3["passed"], rule3["offending_rows"]) == (False, 1)
    assert rule3["examples"] == ["2026-11-29T02:00:01.000000000Z replica_ready"]
    assert "event run_id is not the manifest's" in rule3["message"]
    (row,) = result.metrics.to_pylist()
    assert row["replicas_mean"] == 1.0   # x9 is not one of this run's replicas


def test_a_folder_from_before_the_optional_columns_analyses_unchanged(tmp_path):
    run_dir = four_requests().write(tmp_path / "run")
    new = analyze_run(run_dir)
    for name in ("steady_state_request_log", "warmup_log"):
        path = run_dir / f"{name}.parquet"
        table = pq.read_table(path)
        pq.write_table(table.drop_columns(["replica", "model", "retry_of"]), path)
    assert not (run_dir / "events.parquet").exists()
    old = analyze_run(run_dir)
    assert old.exit_code == new.exit_code == 0
    assert old.metrics.to_pylist() == new.metrics.to_pylist()
    assert old.cost.to_pylist() == new.cost.to_pylist()
    # no episode output for a fixed one-replica run
    for name in ("episode.parquet", "scale_events.parquet", "episode.json",
                 "interruptions.parquet", "derived_metrics_by_model.parquet", "swaps.parquet"):
        assert not (run_dir / name).exists()
