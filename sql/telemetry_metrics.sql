-- name: telemetry_metrics
-- contract §3.2: telemetry per step → telemetry_metrics.parquet.
-- inputs (views): telemetry (contract §2.5), metrics (step_metrics output: step, window_start,
--   window_end, output_tokens)
-- params: $run_id
-- One row per step × source × device × metric with samples inside [window_start, window_end]:
-- mean and max of the values, n the number of samples (a `sample_error` row counts in n and
-- has null mean and max: the gaps stay visible per step).
-- Plus one row per step, device 'all', metric 'energy_j_per_1m_output_tokens':
--   energy(device) = last − first `energy_j` reading inside the window when the device has
--                    that counter, else Σ (p[i] + p[i−1]) / 2 × (t[i] − t[i−1]) over its
--                    `power_w` samples (trapezoid rule, seconds from integer ns);
--   mean = Σ energy(device) / output_tokens × 1,000,000, max null, n = samples used.
-- A device needs two readings inside the window to contribute; if any device with power or
-- energy readings in the window has fewer, the step's energy row is left out rather than
-- understated. No power or energy reading at all: no row. output_tokens null or 0: mean null.
WITH windows AS (
    SELECT step, window_start, window_end, output_tokens FROM metrics
),
inside AS (
    SELECT w.step, t.source, t.device, t.metric, t.value, t."at" AS ts
    FROM windows w
    JOIN telemetry t ON t."at" BETWEEN w.window_start AND w.window_end
),
per_metric AS (
    SELECT step, source, device, metric, avg(value) AS mean, max(value) AS max,
           count(*)::BIGINT AS n
    FROM inside
    GROUP BY step, source, device, metric
),
counters AS (
    SELECT step, device, min(source) AS source,
           arg_max(value, ts) - arg_min(value, ts) AS energy_j, count(*) AS n
    FROM inside
    WHERE metric = 'energy_j' AND value IS NOT NULL
    GROUP BY step, device
),
power AS (
    SELECT step, device, source, value, ts,
           lag(value) OVER (PARTITION BY step, device ORDER BY ts) AS prev_value,
           lag(ts) OVER (PARTITION BY step, device ORDER BY ts) AS prev_ts
    FROM inside
    WHERE metric = 'power_w' AND value IS NOT NULL
),
integrals AS (
    SELECT p.step, p.device, min(p.source) AS source,
           sum(CASE WHEN p.prev_ts IS NULL THEN 0.0
                    ELSE (p.value + p.prev_value) / 2.0
                         * (epoch_ns(p.ts) - epoch_ns(p.prev_ts)) / 1e9 END) AS energy_j,
           count(*) AS n
    FROM power p
    ANTI JOIN counters c ON c.step = p.step AND c.device = p.device
    GROUP BY p.step, p.device
),
devices AS (
    SELECT * FROM counters
    UNION ALL
    SELECT * FROM integrals
),
energy AS (
    SELECT d.step, string_agg(DISTINCT d.source, ',' ORDER BY d.source) AS source,
           sum(d.energy_j) AS energy_j, sum(d.n)::BIGINT AS n, min(d.n) AS fewest
    FROM devices d
    GROUP BY d.step
)
SELECT $run_id AS run_id, step, source, device, metric, mean, max, n
FROM per_metric
UNION ALL
SELECT $run_id AS run_id, e.step, e.source, 'all' AS device,
       'energy_j_per_1m_output_tokens' AS metric,
       e.energy_j / NULLIF(w.output_tokens, 0) * 1000000.0 AS mean,
       NULL::DOUBLE AS max, e.n
FROM energy e
JOIN windows w USING (step)
WHERE e.fewest >= 2
ORDER BY step, device, metric, source
