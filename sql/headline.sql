-- name: headline
-- contract §4: one row per run and SLO → headline.parquet.
-- inputs (views): metrics (step_metrics output), cost (cost_per_1m output), slos (slo_ttft_s, slo_tpot_s)
-- params: $run_id, $candidate, $instance_type, $source
-- The step is, among valid steps with p99 TTFT and p99 TPOT within the SLO, the one with the
-- highest output tok/s (ties: lower target first). A null p99 never meets an SLO. A run that
-- meets the SLO at no valid step keeps its row with meets_slo = false and null figures; a run
-- with no valid step at all was not measured, and its meets_slo is null, not false.
WITH ranked AS (
    SELECT
        s.slo_ttft_s, s.slo_tpot_s, m.step, m.output_tok_s, m.ttft_s_p99, m.tpot_s_p99,
        c.cost_per_1m_output_usd, c.bill_status,
        row_number() OVER (PARTITION BY s.slo_ttft_s, s.slo_tpot_s
                           ORDER BY m.output_tok_s DESC NULLS LAST, m.target, m.step) AS rank
    FROM slos s
    JOIN metrics m ON m.valid AND m.ttft_s_p99 <= s.slo_ttft_s AND m.tpot_s_p99 <= s.slo_tpot_s
    LEFT JOIN cost c USING (step)
)
SELECT
    $run_id AS run_id, $candidate AS candidate, $instance_type AS instance_type, $source AS source,
    s.slo_ttft_s, s.slo_tpot_s,
    CASE WHEN r.step IS NOT NULL THEN true
         WHEN (SELECT count(*) FROM metrics WHERE valid) > 0 THEN false
    END AS meets_slo,
    r.step, r.output_tok_s, r.ttft_s_p99, r.tpot_s_p99, r.cost_per_1m_output_usd, r.bill_status
FROM slos s
LEFT JOIN ranked r ON r.slo_ttft_s = s.slo_ttft_s AND r.slo_tpot_s = s.slo_tpot_s AND r.rank = 1
ORDER BY s.slo_ttft_s, s.slo_tpot_s
