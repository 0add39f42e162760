-- name: itl_cdf
-- The per-token inter-token latency CDF of each step (contract §3 itl_s_*), for the report.
-- inputs (tables): chunk_gaps (chunk_gaps.sql, which defines the per-token ITL `itl_s`),
--                  steady_req (steady_req.sql: step and status per req_no)
-- params: none
-- Each chunk with seq >= 1 of an ok steady request gives itl_s counted `tokens` times:
-- cum_share is the token-weighted cumulative share.
WITH per_token AS (
    SELECT r.step, g.itl_s, g.tokens
    FROM chunk_gaps g JOIN steady_req r USING (req_no)
    WHERE r.ok AND g.seq >= 1 AND g.itl_s IS NOT NULL
)
SELECT step,
       itl_s,
       CAST(sum(tokens) OVER (PARTITION BY step ORDER BY itl_s, tokens
                              ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS DOUBLE)
           / sum(tokens) OVER (PARTITION BY step) AS cum_share
FROM per_token
ORDER BY step, itl_s, cum_share
