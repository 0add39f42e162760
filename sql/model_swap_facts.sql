-- name: model_swap_facts
-- contract §3.9, per step × model: TTFT p99 of the model's OK requests sent during another
-- model's swap (sent_at in [at − value, at) of its model_load or model_wake; a sleep is not a
-- swap) and outside any, and the seconds the model was awake inside the step's window (from
-- the end of a model_load / model_wake to the start of its next model_sleep; a model awake
-- before the window stays awake until it sleeps).
-- inputs (views/tables): steady (request log), events (this run's rows), metrics (the
--                        step's rows: step, window_start, window_end), models (name)
-- params: none
WITH swaps AS (
    SELECT subject AS model, epoch_ns("at") - CAST(round(value * 1e9) AS BIGINT) AS s0,
           epoch_ns("at") AS s1
    FROM events WHERE kind IN ('model_load', 'model_wake') AND value IS NOT NULL
),
req AS (
    SELECT q.step, q.model, epoch_ns(q.sent_at) AS snt,
           (epoch_ns(q.first_token_at) - epoch_ns(q.sent_at)) / 1e9 AS ttft,
           EXISTS (SELECT 1 FROM swaps w WHERE w.model IS DISTINCT FROM q.model
                   AND epoch_ns(q.sent_at) >= w.s0 AND epoch_ns(q.sent_at) < w.s1) AS in_swap
    FROM steady q WHERE q.status = 'ok' AND q.model IS NOT NULL
),
ttft AS (
    SELECT step, model,
           quantile_cont(ttft, 0.99) FILTER (WHERE in_swap) AS ttft_s_p99_during_swap,
           quantile_cont(ttft, 0.99) FILTER (WHERE NOT in_swap) AS ttft_s_p99_outside_swap
    FROM req GROUP BY step, model
),
-- awake intervals: each load / wake's end to the model's next sleep's start
marks AS (
    SELECT subject AS model, kind, epoch_ns("at") AS t_end,
           epoch_ns("at") - CAST(round(coalesce(value, 0) * 1e9) AS BIGINT) AS t_start
    FROM events WHERE kind IN ('model_load', 'model_wake', 'model_sleep')
),
awake AS (
    SELECT a.model, a.t_end AS a0,
           (SELECT min(s.t_start) FROM marks s WHERE s.model = a.model AND s.kind = 'model_sleep'
                                                  AND s.t_start >= a.t_end) AS a1
    FROM marks a WHERE a.kind IN ('model_load', 'model_wake')
),
awake_s AS (
    SELECT m.step, w.model,
           sum(overlap_ns(w.a0, w.a1, epoch_ns(m.window_start), epoch_ns(m.window_end)))
               / 1e9 AS awake_s
    FROM metrics m JOIN awake w ON true
    GROUP BY m.step, w.model
)
SELECT m.step, x.name AS model, t.ttft_s_p99_during_swap, t.ttft_s_p99_outside_swap,
       coalesce(a.awake_s, 0.0) AS awake_s
FROM metrics m CROSS JOIN models x
LEFT JOIN ttft t ON t.step = m.step AND t.model = x.name
LEFT JOIN awake_s a ON a.step = m.step AND a.model = x.name
