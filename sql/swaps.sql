-- name: swaps
-- contract §3.9: swaps.parquet, one row per model_load, model_sleep or model_wake event
-- (`value` the seconds it took, `at` when it ended).
-- inputs (tables): events (this run's rows)
-- params: $run_id
SELECT $run_id AS run_id, subject AS model, kind,
       CAST(make_timestamp_ns(epoch_ns("at") - CAST(round(value * 1e9) AS BIGINT))
            AS TIMESTAMPTZ_NS) AS started_at,
       "at" AS ended_at, value AS seconds
FROM events
WHERE kind IN ('model_load', 'model_sleep', 'model_wake')
ORDER BY "at", subject, kind
