-- name: metrics_by_cache
-- contract §3.1: one row per step × cache class that has requests → derived_metrics_by_cache.parquet.
-- inputs (views): steady (request log, phase = steady; cached_tokens null when absent)
-- params: $run_id
-- cache: 'hit' (cached_tokens > 0), 'miss' (= 0), 'unknown' (null). TTFT and E2E exactly as
-- in step_metrics.sql, over the OK requests of the class; zero samples give _n = 0, the rest null.
-- The TTFT/E2E statistics block repeats step_metrics.sql's on purpose: the SQL loader
-- (sqlfiles.py) runs one self-contained file per query, binds values
-- only through $ parameters and checks them over the whole text; it has no includes, and
-- sharing the block would mean splicing column names into SQL text. The copy is pinned
-- instead: tests/analysis/test_workload_outputs.py checks that one cache class gives
-- step_metrics' numbers exactly.
WITH req AS (
    SELECT
        step, status = 'ok' AS ok,
        CASE WHEN cached_tokens > 0 THEN 'hit'
             WHEN cached_tokens = 0 THEN 'miss'
             ELSE 'unknown' END AS cache,
        (epoch_ns(first_token_at) - epoch_ns(sent_at)) / 1e9 AS ttft,
        (epoch_ns(finished_at) - epoch_ns(sent_at)) / 1e9 AS e2e
    FROM steady
),
classes AS (
    SELECT
        step, cache,
        count(*) AS n_requests,
        count(*) FILTER (WHERE ok) AS n_ok,
        quantile_cont(ttft, [0.50, 0.90, 0.95, 0.99]) FILTER (WHERE ok) AS ttft_q,
        avg(ttft) FILTER (WHERE ok) AS ttft_s_mean,
        min(ttft) FILTER (WHERE ok) AS ttft_s_min,
        max(ttft) FILTER (WHERE ok) AS ttft_s_max,
        count(ttft) FILTER (WHERE ok) AS ttft_s_n,
        quantile_cont(e2e, [0.50, 0.90, 0.95, 0.99]) FILTER (WHERE ok) AS e2e_q,
        avg(e2e) FILTER (WHERE ok) AS e2e_s_mean,
        min(e2e) FILTER (WHERE ok) AS e2e_s_min,
        max(e2e) FILTER (WHERE ok) AS e2e_s_max,
        count(e2e) FILTER (WHERE ok) AS e2e_s_n
    FROM req
    GROUP BY step, cache
)
SELECT
    $run_id AS run_id, step, cache, n_requests, n_ok,
    ttft_q[1] AS ttft_s_p50, ttft_q[2] AS ttft_s_p90, ttft_q[3] AS ttft_s_p95, ttft_q[4] AS ttft_s_p99, ttft_s_mean, ttft_s_min, ttft_s_max, ttft_s_n,
    e2e_q[1] AS e2e_s_p50, e2e_q[2] AS e2e_s_p90, e2e_q[3] AS e2e_s_p95, e2e_q[4] AS e2e_s_p99, e2e_s_mean, e2e_s_min, e2e_s_max, e2e_s_n
FROM classes
ORDER BY step, cache
