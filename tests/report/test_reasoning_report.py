"""Time to first answer token, cost per 1M answer tokens and the draft acceptance rate, from a
hand-computed run folder through the real analyzer to the terminal summary and the reports."""

from __future__ import annotations

import pytest
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.analysis.summary import render
from servingbench.resources.report import write_comparison_report, write_run_report

from tests.support.html import check_safe
from tests.support.runbuilder import RunBuilder, at


def _reasoning_run(tmp_path, run_id: str = "think-1"):
    # two requests at c=1 over [1000, 1500] ms, $36/h: the window costs 36 × 0.5 / 3600 USD
    b = RunBuilder(run_id=run_id, hourly=36.0)
    b.manifest["candidate"] = f"{run_id}-candidate"
    b.request("c=1", sent=1000, chunks=[(1100, 2), (1200, 2), (1300, 2)], finished=1300)
    b.request("c=1", sent=1300, chunks=[(1400, 1), (1500, 3)], finished=1500, sched=1300)
    # the first answer token: 300 ms and 200 ms after sending; 4 + 1 of the 10 tokens reasoned
    for row, first_answer, thought in zip(b.requests, (1300, 1500), (4, 1), strict=True):
        row.update(first_answer_at=at(first_answer), reasoning_tokens=thought)
    for kinds, rid in ((["reasoning", "reasoning", "answer"], b.requests[0]["request_id"]),
                       (["reasoning", "answer"], b.requests[1]["request_id"])):
        for chunk, kind in zip([c for c in b.chunks if c["request_id"] == rid], kinds,
                               strict=True):
            chunk["kind"] = kind
    # the engine drafted 40 tokens in the window and 30 were accepted
    for ms, drafted, accepted in ((1000, 100, 60), (1250, 120, 75), (1500, 140, 90)):
        b.sample(ms, "engine", "spec_draft_tokens", drafted, source="engine_metrics")
        b.sample(ms, "engine", "spec_accepted_tokens", accepted, source="engine_metrics")
    b.hourly_bill(rate=36.0)
    return b.write(tmp_path / run_id)


def test_first_answer_reasoning_and_acceptance_by_hand(tmp_path):
    run_dir = _reasoning_run(tmp_path)
    a = analyze_run(run_dir)
    assert a.exit_code == 0, a.message
    (m,) = a.metrics.to_pylist()
    assert m["ttft_s_p50"] == pytest.approx(0.1)
    assert m["ttfat_s_p50"] == pytest.approx(0.25) and m["ttfat_s_n"] == 2
    assert m["ttfat_s_max"] == pytest.approx(0.3) and m["ttfat_s_min"] == pytest.approx(0.2)
    assert m["reasoning_tokens"] == 5 and m["output_tokens"] == 10
    assert m["spec_acceptance_rate"] == pytest.approx(30 / 40)
    text = render(a)
    # 0.005 USD over 10 output tokens: 500 per 1M; over 5 answer tokens: 1,000 per 1M
    assert "1st answer p50 s" in text and "0.250" in text
    assert "USD / 1M answer" in text and "1,000.0000" in text and "500.0000" in text
    assert "draft accept" in text and "75.0%" in text
    html = write_run_report(run_dir).read_text()
    check_safe(html)
    assert "Reasoning: time to first answer token, cost per answer token" in html
    assert "$1,000.00" in html and "$500.00" in html
    assert "Speculative decoding: draft acceptance" in html


def test_the_comparison_shows_first_answer_and_acceptance_where_they_apply(tmp_path):
    plain = RunBuilder(run_id="plain-1", hourly=36.0)
    plain.manifest["candidate"] = "plain-candidate"
    plain.request("c=1", sent=1000, chunks=[(1100, 1), (1200, 1)], finished=1200)
    plain.hourly_bill(rate=36.0)
    dirs = [_reasoning_run(tmp_path), plain.write(tmp_path / "plain-1")]
    for d in dirs:
        assert analyze_run(d).exit_code == 0
    html = write_comparison_report(dirs, tmp_path / "out" / "comparison.html").read_text()
    check_safe(html)
    assert "Reasoning and speculative decoding" in html and "p99 first answer (s)" in html
    alone = write_comparison_report(dirs[1:], tmp_path / "out2" / "comparison.html").read_text()
    assert "Reasoning and speculative decoding" not in alone  # nothing to show: no section
