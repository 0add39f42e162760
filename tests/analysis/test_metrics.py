"""contract §3 on tiny runs whose every number is worked out by hand here.

Times are milliseconds after T0 (see runbuilder), so a TTFT of `1100 - 1000` ms is 0.1 s.
Percentiles interpolate linearly between order statistics: for sorted x of length n,
p(q) = x[k] + (pos - k) * (x[k+1] - x[k]) with pos = (n - 1) * q, k = floor(pos).
"""

from __future__ import annotations

import pytest
from servingbench.resources.analysis.analyze import analyze_run

from tests.support.runbuilder import RunBuilder, clean_run


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    pos = (len(xs) - 1) * q
    k = int(pos)
    return xs[k] if k + 1 >= len(xs) else xs[k] + (pos - k) * (xs[k + 1] - xs[k])


def stats(xs: list[float]) -> dict:
    return {"p50": pct(xs, .5), "p90": pct(xs, .9), "p95": pct(xs, .95), "p99": pct(xs, .99),
            "mean": sum(xs) / len(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def assert_stats(row: dict, prefix: str, xs: list[float]) -> None:
    for key, want in stats(xs).items():
        assert row[f"{prefix}_{key}"] == pytest.approx(want, abs=1e-12), f"{prefix}_{key}"


def only_step(run_dir, **kw) -> dict:
    result = analyze_run(run_dir, **kw)
    assert result.exit_code == 0, result.gates
    rows = result.metrics.to_pylist()
    assert len(rows) == 1
    return rows[0]


def test_clean_run_every_metric_by_hand(tmp_path):
    # Step c=2, three ok requests (A, B, C), after one warm-up request that must not count.
    #   A: scheduled 1000, sent 1000, chunks 1100 1120 1150, finished 1160   (3 tokens)
    #   B: scheduled 1000, sent 1010, chunks 1210 1250,      finished 1400   (2 tokens)
    #   C: scheduled 1160, sent 1160, chunks 1260 1300 1330 1400, finished 1400 (4 tokens)
    row = only_step(clean_run().write(tmp_path / "run"))
    assert (row["run_id"], row["step"], row["load_mode"], row["target"], row["source"]) == (
        "run-1", "c=2", "concurrency", 2.0, "emulated")
    assert (row["n_requests"], row["n_ok"], row["error_rate"]) == (3, 3, 0.0)
    assert row["window_s"] == 0.4                          # 1400 - 1000 ms
    assert (row["input_tokens"], row["output_tokens"]) == (3 * 512, 3 + 2 + 4)
    assert row["output_tok_s"] == pytest.approx(9 / 0.4)
    assert row["request_s"] == pytest.approx(3 / 0.4)
    assert row["achieved_concurrency"] == pytest.approx((0.16 + 0.39 + 0.24) / 0.4)
    assert row["goodput_s"] == pytest.approx(3 / 0.4)     # all within 2 s / 0.1 s
    assert_stats(row, "ttft_s", [0.1, 0.2, 0.1])
    assert_stats(row, "ttft_sched_s", [0.1, 0.21, 0.1])
    assert row["sched_lag_s_p50"] == 0.0
    assert row["sched_lag_s_p99"] == pytest.approx(pct([0, 0.01, 0], .99))
    assert row["sched_lag_s_max"] == pytest.approx(0.01)
    assert_stats(row, "itl_s", [0.02, 0.03, 0.04, 0.04, 0.03, 0.07])
    assert row["itl_multi_token_share"] == 0.0
    assert_stats(row, "tpot_s", [0.05 / 2, 0.04 / 1, 0.14 / 3])
    assert_stats(row, "e2e_s", [0.16, 0.39, 0.24])
    assert row["valid"] is True and row["invalid_reason"] is None


def test_bundled_chunks_give_per_token_itl_weighted_by_tokens(tmp_path):
    # 4 tokens per chunk: chunk gaps 40 ms and 80 ms → per-token ITL 10 ms (x4), 20 ms (x4).
    # The last chunk carries 2 tokens: gap 10 ms → 5 ms (x2). output = 4+4+4+2 = 14.
    b = RunBuilder()
    b.request("c=1", phase="warmup", sent=0, chunks=[(50, 1)], finished=60)
    b.request("c=1", sent=100, chunks=[(200, 4), (240, 4), (320, 4), (330, 2)], finished=330)
    row = only_step(b.write(tmp_path / "run", bill=False))
    assert_stats(row, "itl_s", [0.01] * 4 + [0.02] * 4 + [0.005] * 2)
    assert row["itl_multi_token_share"] == pytest.approx(3 / 3)   # every chunk after the first
    assert row["output_tokens"] == 14
    assert_stats(row, "tpot_s", [(330 - 200) / 1000 / 13])


def test_mixed_chunk_sizes_share(tmp_path):
    b = RunBuilder()
    b.request("c=1", phase="warmup", sent=0, chunks=[(50, 1)], finished=60)
    b.request("c=1", sent=100, chunks=[(200, 1), (210, 1), (230, 2), (240, 1), (260, 3)],
              finished=260)
    row = only_step(b.write(tmp_path / "run", bill=False))
    assert row["itl_multi_token_share"] == pytest.approx(2 / 4)
    assert_stats(row, "itl_s", [0.01, 0.01, 0.01, 0.01, 0.02 / 3, 0.02 / 3, 0.02 / 3])


def test_itl_percentiles_are_numpys_over_the_token_list_where_ranks_share_a_bucket(tmp_path):
    # The ITL percentiles are taken without holding the token list (a histogram finds the
    # ranks' buckets, only those are sorted): here most gaps sit inside one 10 µs bucket, so
    # several ranks fall in it, beside a tail of bundled chunks and ties across requests.
    import numpy as np

    rng = np.random.default_rng(7)
    b = RunBuilder()
    b.request("c=4", phase="warmup", sent=0, chunks=[(50, 1)], finished=60)
    per_token, t = [], 100_000  # µs: whole microseconds keep the builder's ns exact
    for _ in range(60):
        at, chunks = t + 20_000, []
        for k in range(12):
            tokens = int(rng.choice([1, 1, 1, 3]))
            gap = 5_000 + int(rng.integers(0, 8)) if rng.random() < 0.8 else int(rng.integers(6, 40)) * 1000
            at += gap if k else 0
            chunks.append((at / 1000, tokens))
            if k:
                per_token += [gap / 1e6 / tokens] * tokens
        b.request("c=4", sent=t / 1000, chunks=chunks, finished=(at + 1000) / 1000)
        t = at + 2000
    row = only_step(b.write(tmp_path / "run", bill=False))
    want = np.quantile(np.array(per_token), [0.5, 0.9, 0.95, 0.99])
    got = [row[f"itl_s_p{p}"] for p in (50, 90, 95, 99)]
    assert got == pytest.approx(want.tolist(), rel=1e-9, abs=1e-12)
    assert row["itl_s_n"] == len(per_token)
    assert row["itl_s_mean"] == pytest.approx(float(np.mean(per_token)), rel=1e-9)


def failed_run(n_ok: int, n_failed: int) -> RunBuilder:
    b = RunBuilder()
    b.request("c=1", phase="warmup", sent=0, chunks=[(50, 1)], finished=60)
    t = 100
    for _ in range(n_ok):
        b.request("c=1", sent=t, chunks=[(t + 10, 1), (t + 20, 1)], finished=t + 20)
        t += 20
    for i in range(n_failed):
        status = "timeout" if i % 2 else "http_error"
        b.request("c=1", sent=t, finished=t + 20, status=status,
                  http_status=None if status == "timeout" else 500)
        t += 20
    return b


def test_failed_requests_add_no_tokens_and_invalidate_above_one_percent(tmp_path):
    # 2 ok + 2 failed: error rate 50 %, tokens only from the 2 ok ones, window over all 4.
    row = only_step(failed_run(2, 2).write(tmp_path / "run", bill=False))
    assert (row["n_requests"], row["n_ok"], row["error_rate"]) == (4, 2, 0.5)
    assert (row["output_tokens"], row["input_tokens"]) == (4, 1024)
    assert row["window_s"] == pytest.approx(0.08)
    assert row["output_tok_s"] == pytest.approx(4 / 0.08)
    assert row["ttft_s_n"] == 2 and row["e2e_s_n"] == 2
    assert row["achieved_concurrency"] == pytest.approx(4 * 0.02 / 0.08)  # failed ones included
    assert row["valid"] is False and row["invalid_reason"] == "error_rate"


def test_error_rate_threshold_is_strictly_more_than_one_percent(tmp_path):
    at_one = only_step(failed_run(99, 1).write(tmp_path / "a", bill=False))
    assert at_one["error_rate"] == pytest.approx(0.01) and at_one["valid"] is True
    above = only_step(failed_run(98, 2).write(tmp_path / "b", bill=False))
    assert above["invalid_reason"] == "error_rate"


def test_zero_ok_requests_give_null_statistics_not_zero(tmp_path):
    row = only_step(failed_run(0, 2).write(tmp_path / "run", bill=False))
    for prefix in ("ttft_s", "tpot_s", "itl_s", "e2e_s", "ttft_sched_s"):
        assert row[f"{prefix}_n"] == 0
        assert all(row[f"{prefix}_{k}"] is None for k in ("p50", "p99", "mean", "min", "max"))
    assert row["output_tokens"] is None and row["output_tok_s"] is None
    assert row["itl_multi_token_share"] is None


def test_open_loop_scheduling_lag_and_ttft_from_schedule(tmp_path):
    # rate=4: sends fall 0, 5, 20 ms behind schedule; p99 lag = 5 + 0.98*15 ms > 10 ms.
    b = RunBuilder()
    b.request("rate=4", phase="warmup", sent=0, chunks=[(50, 1)], finished=60)
    for sched, lag in [(100, 0), (350, 5), (600, 20)]:
        b.request("rate=4", sched=sched, sent=sched + lag,
                  chunks=[(sched + lag + 30, 1), (sched + lag + 40, 1)], finished=sched + lag + 40)
    row = only_step(b.write(tmp_path / "run", bill=False))
    assert (row["load_mode"], row["target"]) == ("rate", 4.0)
    assert row["sched_lag_s_p99"] == pytest.approx(pct([0, 0.005, 0.02], .99))
    assert_stats(row, "ttft_sched_s", [0.03, 0.035, 0.05])
    assert_stats(row, "ttft_s", [0.03, 0.03, 0.03])
    assert row["invalid_reason"] == "sched_lag"


def test_low_achieved_concurrency_and_client_limited_are_invalid_in_order(tmp_path):
    b = RunBuilder()
    b.request("c=4", phase="warmup", sent=0, chunks=[(50, 1)], finished=60)
    b.request("c=4", sent=100, chunks=[(110, 1), (120, 1)], finished=120)  # concurrency 1 < 3.6
    b.client_limited.add("c=4")
    row = only_step(b.write(tmp_path / "run", bill=False))
    assert row["achieved_concurrency"] == pytest.approx(1.0)
    assert row["invalid_reason"] == "achieved_concurrency;client_limited"


def test_goodput_counts_only_requests_within_both_slos(tmp_path):
    # TTFT 0.1/0.3 s; TPOT 0.01/0.05 s; a one-token request has no TPOT and passes on TTFT.
    b = RunBuilder()
    b.request("c=1", phase="warmup", sent=0, chunks=[(50, 1)], finished=60)
    b.request("c=1", sent=100, chunks=[(200, 1), (210, 1)], finished=210)    # 0.1, 0.01
    b.request("c=1", sent=210, chunks=[(510, 1), (520, 1)], finished=520)    # 0.3, 0.01
    b.request("c=1", sent=520, chunks=[(620, 1), (670, 1)], finished=670)    # 0.1, 0.05
    b.request("c=1", sent=670, chunks=[(770, 1)], finished=770)              # 0.1, none
    run = b.write(tmp_path / "run", bill=False)
    window = (770 - 100) / 1000
    assert only_step(run, slos=[(0.2, 0.02)])["goodput_s"] == pytest.approx(2 / window)
    assert only_step(run, slos=[(2.0, 0.1)])["goodput_s"] == pytest.approx(4 / window)


def test_steps_are_separate_rows_and_warmup_never_counts(tmp_path):
    b = clean_run()
    b.request("c=1", sent=2000, chunks=[(2100, 1), (2110, 1)], finished=2110)
    result = analyze_run(b.write(tmp_path / "run"))
    rows = {r["step"]: r for r in result.metrics.to_pylist()}
    assert list(rows) == ["c=1", "c=2"]
    assert rows["c=1"]["n_requests"] == 1 and rows["c=2"]["n_requests"] == 3
    assert sum(r["output_tokens"] for r in rows.values()) == 9 + 2  # not the warm-up's 2
