-- name: itl_cdf
-- itl_cdf: the per-token inter-token latency CDF of each step (contract §3 itl_s_*).
-- inputs: relations `requests` (steady_state_request_log, §2.2), `chunks` (chunk_log, §2.3).
-- params: none.
-- Each chunk with seq >= 1 of an ok steady request gives (at[seq] - at[seq-1]) / tokens[seq],
-- counted tokens[seq] times: cum_share is the token-weighted cumulative share.
WITH ok AS (
    SELECT request_id, step
    FROM requests
    WHERE phase = 'steady' AND status = 'ok'
),
gaps AS (
    SELECT o.step,
           c.seq,
           c.tokens,
           lag(c.seq) OVER w AS prev_seq,
           epoch_ns(c.at) - lag(epoch_ns(c.at)) OVER w AS gap_ns
    FROM chunks AS c
    JOIN ok AS o ON o.request_id = c.request_id
    WINDOW w AS (PARTITION BY c.request_id ORDER BY c.seq)
),
per_token AS (
    SELECT step, gap_ns / 1e9 / tokens AS itl_s, tokens
    FROM gaps
    WHERE seq >= 1 AND prev_seq = seq - 1 AND tokens >= 1 AND gap_ns IS NOT NULL
)
SELECT step,
       itl_s,
       CAST(sum(tokens) OVER (PARTITION BY step ORDER BY itl_s, tokens
                              ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS DOUBLE)
           / sum(tokens) OVER (PARTITION BY step) AS cum_share
FROM per_token
ORDER BY step, itl_s, cum_share
