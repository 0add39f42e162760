"""contract §4: a run with no valid step has meets_slo = null ("not measured", with each
step's reason), which is never shown as a failed SLO; a run with valid steps that miss the
SLO keeps meets_slo = false."""

from __future__ import annotations

import pyarrow.parquet as pq
from servingbench.pipelines.cli import main as cli
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.analysis.summary import headline_rows, not_measured, render

from tests.support.runbuilder import clean_run


def _client_limited_run(tmp_path):
    b = clean_run()
    b.client_limited = {"c=2"}
    run_dir = b.write(tmp_path / "run")
    return run_dir


def test_no_valid_step_is_null_not_false(tmp_path):
    run_dir = _client_limited_run(tmp_path)
    result = analyze_run(run_dir)
    assert result.exit_code == 0
    row = pq.read_table(run_dir / "headline.parquet").to_pylist()[0]
    assert row["meets_slo"] is None
    assert row["step"] is None and row["cost_per_1m_output_usd"] is None


def test_valid_steps_outside_the_slo_are_false(tmp_path):
    run_dir = clean_run().write(tmp_path / "run")
    result = analyze_run(run_dir, slos=[(0.001, 0.0001)])
    assert result.headline.to_pylist()[0]["meets_slo"] is False


def test_terminal_summary_says_not_measured_with_the_reason(tmp_path, capsys):
    run_dir = _client_limited_run(tmp_path)
    assert cli(["analyze", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "not measured" in out
    # the builder records loop lag 0.5 ms and client CPU 10 % for every step
    assert "c=2: client-limited: loop lag p99 0.5 ms, client CPU 10% of a core" in out
    assert " no " not in out.split("Headline")[1].splitlines()[2]


def test_not_measured_lines_name_each_invalid_step_only():
    manifest = {"steps": [{"step": "c=8", "loop_lag_p99_s": 0.0088, "client_cpu_share": 0.97}]}
    metrics = [
        {"step": "c=1", "valid": True, "invalid_reason": None},
        {"step": "c=8", "valid": False, "invalid_reason": "error_rate;client_limited",
         "n_requests": 50, "n_ok": 45, "error_rate": 0.1},
    ]
    assert not_measured(metrics, manifest) == [
        "c=8: error rate 10.0% > 1 % (5 of 50 requests failed); "
        "client-limited: loop lag p99 8.8 ms, client CPU 97% of a core"]


def test_headline_rows_spell_the_three_states():
    rows = headline_rows([{"meets_slo": True}, {"meets_slo": False}, {"meets_slo": None}])
    assert [r["meets"] for r in rows] == ["yes", "no", "not measured"]


def test_render_of_a_measured_failure_has_no_not_measured_section(tmp_path):
    run_dir = clean_run().write(tmp_path / "run")
    text = render(analyze_run(run_dir, slos=[(0.001, 0.0001)]))
    assert "not measured" not in text.lower()


def test_demo_table_says_not_measured_and_what_to_do(tmp_path, capsys):
    from servingbench.pipelines.cli.demo import print_headline
    from servingbench.resources.analysis.summary import ADVICE

    measured = clean_run().write(tmp_path / "measured")
    unmeasured = _client_limited_run(tmp_path)
    for run_dir in (measured, unmeasured):
        assert analyze_run(run_dir).exit_code == 0
    print_headline([str(unmeasured), str(measured)])
    out = capsys.readouterr().out
    table_rows = out.split("\n\n")[0].splitlines()[3:]
    assert [r.split()[6] for r in table_rows] == ["yes", "not"]  # met first, not measured last
    assert "c=2: client-limited: loop lag p99 0.5 ms" in out
    assert ADVICE in out


def test_steps_that_failed_only_on_errors_get_advice_about_the_failures_not_the_client():
    from servingbench.resources.analysis.summary import ADVICE, FAILED_ADVICE, advice

    errors = {"valid": False, "invalid_reason": "error_rate"}
    lagging = {"valid": False, "invalid_reason": "error_rate;sched_lag"}
    valid = {"valid": True, "invalid_reason": None}
    assert advice([errors, valid]) == FAILED_ADVICE
    assert advice([errors, lagging]) == ADVICE  # the client fell behind too: its advice stands
    assert advice([{"valid": False, "invalid_reason": "client_limited"}]) == ADVICE
