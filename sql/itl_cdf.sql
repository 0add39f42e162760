-- name: itl_cdf
-- The per-token inter-token latency CDF of each step (contract §3 itl_s_*), for the report.
-- inputs: chunk_gaps (chunk_gaps.sql: the per-token ITL `itl_s`, step and ok of each chunk)
-- params: none
-- Each chunk with seq >= 1 of an ok steady request gives itl_s counted `tokens` times:
-- cum_share is the token-weighted cumulative share.
WITH per_token AS (
    SELECT g.step, g.itl_s, g.tokens
    FROM chunk_gaps g
    WHERE g.ok AND g.seq >= 1 AND g.itl_s IS NOT NULL
)
SELECT step,
       itl_s,
       CAST(sum(tokens) OVER (PARTITION BY step ORDER BY itl_s, tokens
                              ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS DOUBLE)
           / sum(tokens) OVER (PARTITION BY step) AS cum_share
FROM per_token
ORDER BY step, itl_s, cum_share
