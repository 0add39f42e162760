-- name: ttft_by_context
-- TTFT by context length: one row per step × context bucket × cache class that has requests
-- → ttft_by_context.parquet (agentic sessions: where the prefix cache stops serving the
-- history shows as a TTFT jump at some context length).
-- inputs (views): steady (request log, phase = steady)
-- params: $run_id
-- context = input_tokens (the server's usage.prompt_tokens); requests without it (failed
-- before usage arrived) have no bucket and are left out. Buckets double from 1,024:
-- [0, 1024), [1024, 2048), [2048, 4096), …; context_lo/_hi are the bucket's bounds.
-- cache: as contract §3.1 ('hit' cached_tokens > 0, 'miss' = 0, 'unknown' null), plus 'all'
-- (every class of the bucket together). TTFT as in step_metrics.sql over the OK requests;
-- zero samples give ttft_s_n = 0 and null statistics. cached_share = Σ cached_tokens /
-- Σ input_tokens over the OK requests that report both.
WITH req AS (
    SELECT
        step, status = 'ok' AS ok, input_tokens, cached_tokens,
        CASE WHEN cached_tokens > 0 THEN 'hit'
             WHEN cached_tokens = 0 THEN 'miss'
             ELSE 'unknown' END AS cache,
        CASE WHEN input_tokens < 1024 THEN 0
             ELSE CAST(1024 * pow(2, floor(log2(input_tokens / 1024.0))) AS BIGINT) END AS lo,
        (epoch_ns(first_token_at) - epoch_ns(sent_at)) / 1e9 AS ttft
    FROM steady
    WHERE input_tokens IS NOT NULL
),
grouped AS (
    SELECT
        step, lo, coalesce(cache, 'all') AS cache,
        count(*) AS n_requests,
        count(*) FILTER (WHERE ok) AS n_ok,
        quantile_cont(ttft, [0.50, 0.90, 0.99]) FILTER (WHERE ok) AS ttft_q,
        avg(ttft) FILTER (WHERE ok) AS ttft_s_mean,
        count(ttft) FILTER (WHERE ok) AS ttft_s_n,
        sum(cached_tokens) FILTER (WHERE ok AND cached_tokens IS NOT NULL)
            / NULLIF(sum(input_tokens) FILTER (WHERE ok AND cached_tokens IS NOT NULL), 0)
            AS cached_share
    FROM req
    GROUP BY GROUPING SETS ((step, lo, cache), (step, lo))
)
SELECT
    $run_id AS run_id, step, lo AS context_lo,
    CASE WHEN lo = 0 THEN 1024 ELSE 2 * lo END AS context_hi,
    cache, n_requests, n_ok,
    ttft_q[1] AS ttft_s_p50, ttft_q[2] AS ttft_s_p90, ttft_q[3] AS ttft_s_p99,
    ttft_s_mean, ttft_s_n, CAST(cached_share AS DOUBLE) AS cached_share
FROM grouped
ORDER BY step, context_lo, cache
