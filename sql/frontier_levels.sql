-- name: frontier_levels
-- contract §3.6: one row per interactivity level × candidate → frontier_levels.parquet.
-- inputs (views): frontier (frontier.parquet rows of the latest accepted run of each
--                 candidate), level_runs (run_id, candidate, source, rankable: false for a
--                 run that failed quality parity), levels (level_tok_s)
-- params: $slo_ttft_s
-- At level L a candidate's step is, among its valid steps with interactivity ≥ L and p99
-- TTFT within the SLO, the cheapest per 1M output tokens (none with a cost: the highest
-- output tok/s per accelerator, cost null). Measured steps only: nothing is interpolated.
-- A candidate reaching no step keeps its row with a null step. rank: 1 = cheapest among
-- the level's rows with a cost, counted apart for measured and emulated (never ranked
-- against each other) and never for a run that failed quality parity.
WITH reach AS (
    SELECT
        l.level_tok_s, f.run_id, f.step, f.interactivity_tok_s, f.output_tok_s_per_accel,
        f.cost_per_1m_output_usd, f.bill_status,
        row_number() OVER (
            PARTITION BY l.level_tok_s, f.run_id
            ORDER BY f.cost_per_1m_output_usd ASC NULLS LAST,
                     f.output_tok_s_per_accel DESC NULLS LAST,
                     f.interactivity_tok_s DESC, f.step) AS pick
    FROM levels l
    JOIN frontier f
      ON coalesce(f.valid, false) AND f.interactivity_tok_s >= l.level_tok_s
     AND f.ttft_s_p99 <= $slo_ttft_s
),
grid AS (
    SELECT l.level_tok_s, r.run_id, r.candidate, r.source, r.rankable
    FROM levels l CROSS JOIN level_runs r
),
picked AS (
    SELECT
        g.level_tok_s, g.candidate, g.run_id, c.step, c.interactivity_tok_s,
        c.output_tok_s_per_accel, c.cost_per_1m_output_usd, c.bill_status, g.source,
        c.cost_per_1m_output_usd IS NOT NULL AND g.rankable AS ranked
    FROM grid g
    LEFT JOIN reach c ON c.level_tok_s = g.level_tok_s AND c.run_id = g.run_id AND c.pick = 1
)
SELECT
    level_tok_s, candidate, run_id, step, interactivity_tok_s, output_tok_s_per_accel,
    cost_per_1m_output_usd, bill_status, source,
    CASE WHEN ranked THEN rank() OVER (PARTITION BY level_tok_s, source, ranked
                                       ORDER BY cost_per_1m_output_usd) END AS rank
FROM picked
ORDER BY level_tok_s, source, rank NULLS LAST, candidate
