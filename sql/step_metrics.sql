-- name: step_metrics
-- contract §3: one row per step of the steady phase → derived_metrics.parquet.
-- inputs (views): steady (request log, phase = steady), chunk_gaps (chunk_gaps.sql) and
--                 its histogram in chunk_facts (chunk_facts.sql),
--                 manifest_steps (step, client_limited) from the manifest's steps[],
--                 timeline (timeline.sql: replica intervals, contract §2.6)
-- params: $run_id, $source (manifest source), $slo_ttft_s, $slo_tpot_s (goodput and SLO
--         attainment thresholds), $fixed_replicas (the replica count of a run without
--         replica events, else null), $model (null: every request; a name: that model's
--         requests only, over the step's own window, contract §3.9)
-- Durations are float64 seconds from integer nanoseconds: (epoch_ns(a) - epoch_ns(b)) / 1e9.
WITH win AS (   -- the step's window, over all of its requests whatever $model picks
    SELECT step, min(sent_at) AS window_start, max(finished_at) AS window_end
    FROM steady GROUP BY step
),
req AS (
    SELECT
        step, load_mode, target, request_id, status = 'ok' AS ok,
        sent_at, finished_at, input_tokens, output_tokens,
        (epoch_ns(first_token_at) - epoch_ns(sent_at)) / 1e9 AS ttft,
        -- time to first answer token: null without first_answer_at (an older log), and the
        -- aggregates below skip nulls, so such a step has ttfat_s_n = 0 and null statistics
        (epoch_ns(first_answer_at) - epoch_ns(sent_at)) / 1e9 AS ttfat,
        reasoning_tokens,
        (epoch_ns(first_token_at) - epoch_ns(scheduled_at)) / 1e9 AS ttft_sched,
        (epoch_ns(sent_at) - epoch_ns(scheduled_at)) / 1e9 AS sched_lag,
        (epoch_ns(finished_at) - epoch_ns(sent_at)) / 1e9 AS e2e,
        CASE WHEN output_tokens >= 2
             THEN (epoch_ns(last_token_at) - epoch_ns(first_token_at)) / 1e9 / (output_tokens - 1)
        END AS tpot,
        -- seconds per output token end to end (e2e_norm_interactivity_tok_s = 1 / its p90)
        CASE WHEN output_tokens >= 1
             THEN (epoch_ns(finished_at) - epoch_ns(sent_at)) / 1e9 / output_tokens
        END AS e2e_per_tok
    FROM steady
    WHERE CAST($model AS VARCHAR) IS NULL OR model = CAST($model AS VARCHAR)
),
steps AS (
    SELECT
        step, load_mode, target,
        count(*) AS n_requests,
        count(*) FILTER (WHERE ok) AS n_ok,
        CAST(sum(input_tokens) FILTER (WHERE ok) AS BIGINT) AS input_tokens,
        CAST(sum(output_tokens) FILTER (WHERE ok) AS BIGINT) AS output_tokens,
        CAST(sum(reasoning_tokens) FILTER (WHERE ok) AS BIGINT) AS reasoning_tokens,
        sum(e2e) AS busy_s,
        count(*) FILTER (WHERE slo_met(ok, ttft, tpot, output_tokens, $slo_ttft_s,
                                       $slo_tpot_s)) AS n_good,
        quantile_cont(ttft, [0.50, 0.90, 0.95, 0.99]) FILTER (WHERE ok) AS ttft_q,
        avg(ttft) FILTER (WHERE ok) AS ttft_s_mean,
        min(ttft) FILTER (WHERE ok) AS ttft_s_min,
        max(ttft) FILTER (WHERE ok) AS ttft_s_max,
        count(ttft) FILTER (WHERE ok) AS ttft_s_n,
        quantile_cont(ttfat, [0.50, 0.90, 0.95, 0.99]) FILTER (WHERE ok) AS ttfat_q,
        avg(ttfat) FILTER (WHERE ok) AS ttfat_s_mean,
        min(ttfat) FILTER (WHERE ok) AS ttfat_s_min,
        max(ttfat) FILTER (WHERE ok) AS ttfat_s_max,
        count(ttfat) FILTER (WHERE ok) AS ttfat_s_n,
        quantile_cont(ttft_sched, [0.50, 0.90, 0.95, 0.99]) FILTER (WHERE ok) AS ttft_sched_q,
        avg(ttft_sched) FILTER (WHERE ok) AS ttft_sched_s_mean,
        min(ttft_sched) FILTER (WHERE ok) AS ttft_sched_s_min,
        max(ttft_sched) FILTER (WHERE ok) AS ttft_sched_s_max,
        count(ttft_sched) FILTER (WHERE ok) AS ttft_sched_s_n,
        quantile_cont(sched_lag, [0.50, 0.99]) AS sched_lag_q,
        max(sched_lag) AS sched_lag_s_max,
        quantile_cont(tpot, [0.50, 0.90, 0.95, 0.99]) FILTER (WHERE ok) AS tpot_q,
        avg(tpot) FILTER (WHERE ok) AS tpot_s_mean,
        min(tpot) FILTER (WHERE ok) AS tpot_s_min,
        max(tpot) FILTER (WHERE ok) AS tpot_s_max,
        count(tpot) FILTER (WHERE ok) AS tpot_s_n,
        quantile_cont(e2e, [0.50, 0.90, 0.95, 0.99]) FILTER (WHERE ok) AS e2e_q,
        avg(e2e) FILTER (WHERE ok) AS e2e_s_mean,
        min(e2e) FILTER (WHERE ok) AS e2e_s_min,
        max(e2e) FILTER (WHERE ok) AS e2e_s_max,
        count(e2e) FILTER (WHERE ok) AS e2e_s_n,
        quantile_cont(e2e_per_tok, 0.90) FILTER (WHERE ok) AS e2e_per_tok_p90
    FROM req
    GROUP BY step, load_mode, target
),
windowed AS (
    SELECT s.*, w.window_start, w.window_end,
           (epoch_ns(w.window_end) - epoch_ns(w.window_start)) / 1e9 AS window_s
    FROM steps s JOIN win w USING (step)
),
-- replicas_ready(t) integrated over the step's window (contract §2.6): each replica interval's
-- overlap with it; a window of length 0 takes the count at its start
replicas AS (
    SELECT w.step,
           sum(overlap_ns(t.start_ns, t.end_ns, epoch_ns(w.window_start),
                          epoch_ns(w.window_end)))::DOUBLE AS ns,
           count(*) FILTER (WHERE t.start_ns <= epoch_ns(w.window_start)
                            AND coalesce(t.end_ns, 9223372036854775807) > epoch_ns(w.window_start))
               AS at_start
    FROM win w JOIN timeline t ON t.kind = 'replica'
    GROUP BY w.step
),
-- Per-token ITL: chunk seq >= 1 of an ok request gives (at[seq] - at[seq-1]) / tokens,
-- counted `tokens` times, so a chunk bundling k tokens weighs k. chunk_gaps carries each
-- chunk's step, ok and model.
gaps AS (
    SELECT g.step, g.tokens AS w, g.itl_s AS itl, CAST(floor(g.itl_s * 1e5) AS BIGINT) AS b
    FROM chunk_gaps g
    WHERE g.ok AND g.seq >= 1
      AND (CAST($model AS VARCHAR) IS NULL OR g.model = CAST($model AS VARCHAR))
),
-- Its percentiles are quantile_cont's over that token-weighted list, computed without the
-- list: quantile_cont keeps every value of a group in memory, which DuckDB cannot spill (a
-- night-sized step has hundreds of millions of tokens). Instead: a histogram of 10 µs buckets
-- (a few thousand rows whatever the run's size) says which bucket holds each rank that a
-- percentile interpolates between, and only the chunks of those buckets are sorted and
-- ranked. Exact: the values picked are the same order statistics. The histogram was counted
-- per step and model with the requests' chunk facts, in their one pass (chunk_facts.sql); it
-- also counts the chunks that bundle several tokens (b null: a chunk without a gap, counted
-- there only).
gaps_by_bucket AS (
    SELECT step, b, CAST(sum(chunk_tokens) AS BIGINT) AS w, sum(itl_w_sum) AS itl_w_sum,
           min(itl_min) AS itl_min, max(itl_max) AS itl_max,
           sum(n_chunks) AS n_chunks, sum(n_multi) AS n_multi
    FROM chunk_facts
    WHERE NOT per_request AND itl_chunk
      AND (CAST($model AS VARCHAR) IS NULL OR model = CAST($model AS VARCHAR))
    GROUP BY step, b
),
itl_hist AS (
    SELECT step, b, w, itl_w_sum, itl_min, itl_max FROM gaps_by_bucket WHERE b IS NOT NULL
),
itl_n AS (
    SELECT step, CAST(sum(w) AS BIGINT) AS n, min(itl_min) AS itl_s_min,
           max(itl_max) AS itl_s_max, sum(itl_w_sum) / sum(w) AS itl_s_mean
    FROM itl_hist GROUP BY step
),
-- quantile_cont's rule: position h = (n - 1) * p of the sorted list (0-based), between the
-- values at ranks floor(h) and ceil(h)
itl_ranks AS (
    SELECT step, i, h, CAST(floor(h) AS BIGINT) AS lo, CAST(ceil(h) AS BIGINT) AS hi
    FROM (SELECT step, i, CAST(n - 1 AS DOUBLE) * p AS h
          FROM itl_n, (VALUES (1, 0.50::DOUBLE), (2, 0.90::DOUBLE), (3, 0.95::DOUBLE),
                              (4, 0.99::DOUBLE)) q(i, p))
),
itl_hist_cum AS (   -- bucket b holds the ranks [start, start + w)
    SELECT step, b, w,
           CAST(sum(w) OVER (PARTITION BY step ORDER BY b
                             ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS BIGINT) - w AS start
    FROM itl_hist
),
itl_need AS (
    SELECT DISTINCT c.step, c.b, c.start
    FROM itl_ranks r JOIN itl_hist_cum c ON c.step = r.step
    WHERE (c.start <= r.lo AND r.lo < c.start + c.w) OR (c.start <= r.hi AND r.hi < c.start + c.w)
),
itl_cum AS (   -- in those buckets only: value itl holds the ranks [upto - w, upto)
    SELECT x.step, x.itl, x.w,
           n.start + CAST(sum(x.w) OVER (PARTITION BY x.step, x.b ORDER BY x.itl
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
                          AS BIGINT) AS upto
    FROM gaps x JOIN itl_need n ON x.step = n.step AND x.b = n.b
),
itl_at AS (
    SELECT r.step, r.i, r.h, r.lo,
           min(c.itl) FILTER (WHERE c.upto - c.w <= r.lo AND r.lo < c.upto) AS v_lo,
           min(c.itl) FILTER (WHERE c.upto - c.w <= r.hi AND r.hi < c.upto) AS v_hi
    FROM itl_ranks r JOIN itl_cum c ON c.step = r.step
    GROUP BY r.step, r.i, r.h, r.lo
),
itl AS (
    SELECT n.step,
        -- numpy's linear interpolation (exact at both ends); quantile_cont's agrees with it
        -- to the last bit or one unit in it
        list(CASE WHEN a.v_hi = a.v_lo THEN a.v_lo
                  WHEN a.h - a.lo < 0.5 THEN a.v_lo + (a.v_hi - a.v_lo) * (a.h - a.lo)
                  ELSE a.v_hi - (a.v_hi - a.v_lo) * (1 - (a.h - a.lo)) END ORDER BY a.i) AS q,
        any_value(n.itl_s_mean) AS itl_s_mean,
        any_value(n.itl_s_min) AS itl_s_min,
        any_value(n.itl_s_max) AS itl_s_max,
        any_value(n.n) AS itl_s_n
    FROM itl_n n JOIN itl_at a USING (step)
    GROUP BY n.step
),
itl_share AS (
    SELECT step, CAST(sum(n_multi) AS DOUBLE) / sum(n_chunks) AS itl_multi_token_share
    FROM gaps_by_bucket GROUP BY step
),
derived AS (
    SELECT
        s.*,
        (s.n_requests - s.n_ok) / s.n_requests AS error_rate,
        s.output_tokens / NULLIF(s.window_s, 0) AS output_tok_s,
        s.n_ok / NULLIF(s.window_s, 0) AS request_s,
        s.busy_s / NULLIF(s.window_s, 0) AS achieved_concurrency,
        s.n_good / NULLIF(s.window_s, 0) AS goodput_s,
        s.n_good / s.n_requests AS slo_attainment,
        1.0 / NULLIF(s.e2e_per_tok_p90, 0) AS e2e_norm_interactivity_tok_s,
        CASE WHEN $fixed_replicas IS NOT NULL THEN CAST($fixed_replicas AS DOUBLE)
             WHEN s.window_s > 0 THEN coalesce(rp.ns, 0) / 1e9 / s.window_s
             ELSE CAST(coalesce(rp.at_start, 0) AS DOUBLE) END AS replicas_mean,
        coalesce(m.client_limited, false) AS client_limited
    FROM windowed s LEFT JOIN manifest_steps m USING (step) LEFT JOIN replicas rp USING (step)
)
SELECT * EXCLUDE (invalid_reason), invalid_reason IS NULL AS valid, invalid_reason
FROM (
SELECT
    $run_id AS run_id, d.step, d.load_mode, d.target, $source AS source,
    d.n_requests, d.n_ok, d.error_rate,
    d.window_start, d.window_end, d.window_s,
    d.input_tokens, d.output_tokens, d.output_tok_s, d.request_s,
    d.achieved_concurrency, d.goodput_s,
    d.ttft_q[1] AS ttft_s_p50, d.ttft_q[2] AS ttft_s_p90, d.ttft_q[3] AS ttft_s_p95, d.ttft_q[4] AS ttft_s_p99, d.ttft_s_mean, d.ttft_s_min, d.ttft_s_max, d.ttft_s_n,
    d.ttfat_q[1] AS ttfat_s_p50, d.ttfat_q[2] AS ttfat_s_p90, d.ttfat_q[3] AS ttfat_s_p95, d.ttfat_q[4] AS ttfat_s_p99, d.ttfat_s_mean, d.ttfat_s_min, d.ttfat_s_max, d.ttfat_s_n,
    d.reasoning_tokens,
    d.ttft_sched_q[1] AS ttft_sched_s_p50, d.ttft_sched_q[2] AS ttft_sched_s_p90, d.ttft_sched_q[3] AS ttft_sched_s_p95, d.ttft_sched_q[4] AS ttft_sched_s_p99, d.ttft_sched_s_mean, d.ttft_sched_s_min, d.ttft_sched_s_max, d.ttft_sched_s_n,
    d.sched_lag_q[1] AS sched_lag_s_p50, d.sched_lag_q[2] AS sched_lag_s_p99, d.sched_lag_s_max,
    i.q[1] AS itl_s_p50, i.q[2] AS itl_s_p90, i.q[3] AS itl_s_p95, i.q[4] AS itl_s_p99, i.itl_s_mean, i.itl_s_min, i.itl_s_max, coalesce(i.itl_s_n, 0) AS itl_s_n,
    sh.itl_multi_token_share,
    d.tpot_q[1] AS tpot_s_p50, d.tpot_q[2] AS tpot_s_p90, d.tpot_q[3] AS tpot_s_p95, d.tpot_q[4] AS tpot_s_p99, d.tpot_s_mean, d.tpot_s_min, d.tpot_s_max, d.tpot_s_n,
    d.e2e_q[1] AS e2e_s_p50, d.e2e_q[2] AS e2e_s_p90, d.e2e_q[3] AS e2e_s_p95, d.e2e_q[4] AS e2e_s_p99, d.e2e_s_mean, d.e2e_s_min, d.e2e_s_max, d.e2e_s_n,
    d.slo_attainment, d.e2e_norm_interactivity_tok_s, d.replicas_mean,
    d.output_tok_s / NULLIF(d.replicas_mean, 0) AS output_tok_s_per_replica,
    NULLIF(concat_ws(';',
        CASE WHEN 100 * (d.n_requests - d.n_ok) > d.n_requests THEN 'error_rate' END,
        CASE WHEN d.load_mode = 'concurrency' AND d.achieved_concurrency < 0.9 * d.target
             THEN 'achieved_concurrency' END,
        CASE WHEN d.load_mode = 'rate' AND d.sched_lag_q[2] > 0.010 THEN 'sched_lag' END,
        CASE WHEN d.client_limited THEN 'client_limited' END
    ), '') AS invalid_reason
FROM derived d
LEFT JOIN itl i USING (step)
LEFT JOIN itl_share sh USING (step)
)
ORDER BY load_mode, target, step
