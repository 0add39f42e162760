"""contract §5: each bad fixture is rejected by exactly the rule it breaks, with its evidence,
the cost files are withheld and every raw file is kept as it was."""

from __future__ import annotations

import hashlib
import json

import pytest
from servingbench.pipelines.cli import main as cli
from servingbench.resources.analysis.analyze import analyze_run

from tests.support.runbuilder import HOUR_MS, RunBuilder, clean_run

RAW = ("manifest.json", "warmup_log.parquet", "steady_state_request_log.parquet",
       "chunk_log.parquet", "bill.parquet")


def _null(field):
    def edit(b: RunBuilder):
        b.requests[2][field] = None
    return edit


def _set(index, **values):
    def edit(b: RunBuilder):
        b.requests[index].update(values)
    return edit


def _bill(**kw):
    def edit(b: RunBuilder):
        b.bill_row(0, HOUR_MS, 1.0, 0.0, usage_type="USE1-Other", **kw)
    return edit


def _replace_bill(*rows):
    def edit(b: RunBuilder):
        b.bill.clear()
        for args, kw in rows:
            b.bill_row(*args, **kw)
    return edit


def _build(edit) -> RunBuilder:
    b = clean_run()
    edit(b)
    return b


def _repeat_id_across_logs(b: RunBuilder) -> RunBuilder:
    b.request("c=2", phase="warmup", sent=20, finished=30, status="http_error",
              request_id=b.requests[1]["request_id"])
    return b


def _chunks_decrease(b: RunBuilder) -> RunBuilder:
    b.request("c=1", sent=2000, chunks=[(2100, 1), (2150, 1), (2130, 1)], finished=2160)
    return b


def _warmup_overlaps(b: RunBuilder) -> RunBuilder:
    b.requests[0]["finished_at"] = b.requests[1]["sent_at"] + 5_000_000  # 5 ms after A's send
    return b


def _chunk(index, **values):
    def edit(b: RunBuilder):
        b.chunks[index].update(values)
    return edit


def _orphan_chunk(b: RunBuilder) -> RunBuilder:
    b.chunks.append({**b.chunks[3], "request_id": "in-neither-log", "seq": 0})
    return b


HOUR = (0, HOUR_MS)
BAD = {
    # rule 1: complete
    "sent_at missing": (1, _null("sent_at")),
    "finished_at missing": (1, _null("finished_at")),
    "ok without first_token_at": (1, _null("first_token_at")),
    "ok without output_tokens": (1, _set(3, output_tokens=None)),
    # rule 2: ordered
    "sent before scheduled": (2, _set(1, scheduled_at=clean_run().requests[1]["sent_at"] + 1)),
    "chunk after finished_at": (2, _set(1, finished_at=clean_run().requests[1]["finished_at"] - 20_000_000)),
    "chunk times decrease": (2, _chunks_decrease),
    # rule 3: phased
    "request_id in both logs": (3, _repeat_id_across_logs),
    "unknown phase": (3, _set(2, phase="cooldown")),
    "steady sent before warm-up ended": (3, _warmup_overlaps),
    "request from another run": (3, _set(2, run_id="someone-elses-run")),
    "chunk from another run": (3, _chunk(3, run_id="someone-elses-run")),
    "orphan chunk": (3, _orphan_chunk),
    # rule 4: counted
    "usage disagrees with chunk tokens": (4, _set(1, output_tokens=5)),
    "ok with zero output tokens": (4, _set(1, output_tokens=0, output_tokens_source="chunks")),
    # rule 5: scoped, one fixture per mismatch kind
    "other account": (5, _bill(account_id="999999999999")),
    "other region": (5, _bill(region="eu-west-1")),
    "other instance type": (5, _bill(instance_type="p4d.24xlarge")),
    "other tag value": (5, _bill(tag_value="someone-elses-run")),
    "window not covered": (5, _replace_bill(((HOUR_MS, 2 * HOUR_MS, 55.04, 1.0), {}))),
    "instance-hours 5 % short": (5, _replace_bill(((*HOUR, 0.001, 0.00001), {}))),
    "instance-hours beyond scope": (5, _replace_bill(((*HOUR, 110.08, 2.0), {}))),
    "non-USD": (5, _replace_bill(((*HOUR, 55.04, 1.0), {"unit": "EUR"}))),
    # rule 6: single-source
    "mixed sources": (6, _bill(source="price_list", instance_type=None)),
    "a row naming no source": (6, _bill(source=None, instance_type=None)),
}


def digests(run_dir):
    return {n: hashlib.sha256((run_dir / n).read_bytes()).hexdigest() for n in RAW}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_fixture_is_rejected_by_exactly_its_rule(tmp_path, case, capsys):
    rule, edit = BAD[case]
    run_dir = _build(edit).write(tmp_path / "run")
    # a stale cost table from an earlier, accepted analysis must not survive a rejection
    (run_dir / "cost_per_1m.parquet").write_bytes(b"stale")
    before = digests(run_dir)

    assert cli(["analyze", str(run_dir)]) == 3
    out = capsys.readouterr().out
    gates = json.loads((run_dir / "gates.json").read_text())

    failed = [g["rule"] for g in gates if g["passed"] is False]
    assert failed == [rule], gates
    bad = gates[rule - 1]
    assert bad["offending_rows"] >= 1 and 1 <= len(bad["examples"]) <= 5 and bad["message"]
    assert f"rule {rule} ({bad['name']})" in out and "WITHHELD" in out
    assert [g["rule"] for g in gates] == [1, 2, 3, 4, 5, 6]
    assert not (run_dir / "cost_per_1m.parquet").exists()
    assert not (run_dir / "headline.parquet").exists()
    assert (run_dir / "derived_metrics.parquet").exists()
    assert digests(run_dir) == before  # raw records untouched


def test_examples_name_the_offending_requests(tmp_path):
    b = clean_run()
    for i in (1, 2, 3):
        b.requests[i]["sent_at"] = None
    result = analyze_run(b.write(tmp_path / "run"))
    gate = result.gates[0]
    assert gate["offending_rows"] == 3
    assert gate["examples"] == sorted(b.requests[i]["request_id"] for i in (1, 2, 3))


def test_repeated_request_id_counts_every_row_carrying_it(tmp_path):
    result = analyze_run(_build(_repeat_id_across_logs).write(tmp_path / "run"))
    assert result.gates[2]["offending_rows"] == 2


def test_uncovered_stretch_counts_once_with_its_start_as_example(tmp_path):
    b = clean_run()
    _replace_bill(((HOUR_MS, 2 * HOUR_MS, 55.04, 1.0), {}))(b)
    result = analyze_run(b.write(tmp_path / "run"))
    gate = result.gates[4]
    assert gate["offending_rows"] == 1
    assert gate["examples"] == ["2026-11-29T02:00:01.000000000Z"]  # the steady phase's start
    assert "not covered" in gate["message"]


def test_mixed_sources_count_the_minority_rows(tmp_path):
    b = clean_run()
    for _ in range(2):
        _bill(source="price_list", instance_type=None)(b)
    _bill(source="cost_explorer", instance_type=None)(b)
    result = analyze_run(b.write(tmp_path / "run"))
    # 4 rows: price_sheet ×1 (instance), price_list ×2, cost_explorer ×1 → the most common
    # source is price_list, so the 2 other rows offend.
    assert result.gates[5]["offending_rows"] == 2


def test_run_without_bill_reports_rules_5_and_6_as_no_bill(tmp_path, capsys):
    run_dir = clean_run().write(tmp_path / "run", bill=False)
    assert cli(["analyze", str(run_dir)]) == 0
    gates = json.loads((run_dir / "gates.json").read_text())
    assert [(g["passed"], g["message"]) for g in gates[4:]] == [(None, "no bill"), (None, "no bill")]
    assert (run_dir / "derived_metrics.parquet").exists()
    assert not (run_dir / "cost_per_1m.parquet").exists()
    assert "no cost table" in capsys.readouterr().out


def test_gates_json_shape(tmp_path):
    run_dir = clean_run().write(tmp_path / "run")
    assert analyze_run(run_dir).exit_code == 0
    gates = json.loads((run_dir / "gates.json").read_text())
    assert [(g["rule"], g["name"]) for g in gates] == [
        (1, "complete"), (2, "ordered"), (3, "phased"), (4, "counted"), (5, "scoped"),
        (6, "single-source")]
    assert all(set(g) == {"rule", "name", "passed", "offending_rows", "examples", "message"}
               for g in gates)
    assert all(g["passed"] is True and g["offending_rows"] == 0 for g in gates)
