-- name: spec_acceptance
-- contract §3: spec_acceptance_rate per step, from the engine's speculative-decoding counters.
-- inputs (views): telemetry (contract §2.5), metrics (step_metrics output: step, window_start,
--   window_end)
-- params: none
-- Counter rule of §3.2: a counter's increase over the step is its last in-window sample minus
-- its first, per source × device (no interpolation to the window's ends); increases are summed
-- over devices. rate = Σ accepted increase / Σ draft increase; null when either counter has no
-- in-window sample or the draft counter did not increase (nothing was drafted).
WITH inside AS (
    SELECT m.step, t.source, t.device, t.metric, t.value, t."at" AS ts
    FROM metrics m
    JOIN telemetry t ON t."at" BETWEEN m.window_start AND m.window_end
    WHERE t.metric IN ('spec_draft_tokens', 'spec_accepted_tokens') AND t.value IS NOT NULL
),
increases AS (
    SELECT step, metric, arg_max(value, ts) - arg_min(value, ts) AS increase
    FROM inside
    GROUP BY step, source, device, metric
),
per_step AS (
    SELECT step,
           sum(increase) FILTER (WHERE metric = 'spec_draft_tokens') AS drafted,
           sum(increase) FILTER (WHERE metric = 'spec_accepted_tokens') AS accepted
    FROM increases
    GROUP BY step
)
SELECT step, accepted / NULLIF(drafted, 0) AS spec_acceptance_rate
FROM per_step
ORDER BY step
