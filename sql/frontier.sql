-- name: frontier
-- contract §3.6: one row per step of a run → frontier.parquet.
-- inputs (views): metrics (step_metrics output), cost (cost_per_1m output; no rows when the
--                 run has no accepted bill, so the cost columns stay null)
-- params: $candidate, $accelerators (node_count × accelerators_per_node; null when unknown)
-- The step's slo_attainment and e2e_norm_interactivity_tok_s (contract §3) ride along.
-- interactivity = 1 / tpot_s_p50. The rows come without `on_frontier`: analysis/frontier.py
-- hands them to pareto.sql, the one place the frontier rule is written.
WITH points AS (
    SELECT
        m.run_id, $candidate AS candidate, m.step, m.source, m.valid,
        CAST($accelerators AS BIGINT) AS accelerators,
        1.0 / NULLIF(m.tpot_s_p50, 0) AS interactivity_tok_s,
        m.output_tok_s / CAST($accelerators AS DOUBLE) AS output_tok_s_per_accel,
        (m.input_tokens + m.output_tokens) / NULLIF(m.window_s, 0)
            / CAST($accelerators AS DOUBLE) AS total_tok_s_per_accel,
        m.ttft_s_p99, m.tpot_s_p99,
        c.cost_per_1m_output_usd, c.bill_status,
        c.window_cost_usd / NULLIF(m.input_tokens + m.output_tokens, 0) * 1e6
            AS cost_per_1m_total_usd,
        m.slo_attainment, m.e2e_norm_interactivity_tok_s,
        m.load_mode, m.target
    FROM metrics m
    LEFT JOIN cost c USING (step)
)
SELECT
    p.run_id, p.candidate, p.step, p.source, p.valid, p.accelerators, p.interactivity_tok_s,
    p.output_tok_s_per_accel, p.total_tok_s_per_accel, p.ttft_s_p99, p.tpot_s_p99,
    p.cost_per_1m_output_usd, p.bill_status, p.cost_per_1m_total_usd,
    p.slo_attainment, p.e2e_norm_interactivity_tok_s
FROM points p
ORDER BY p.load_mode, p.target, p.step
