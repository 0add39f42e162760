-- name: chunk_gaps
-- The chunks of steady requests, each with the gap to the chunk before it (by seq), computed
-- once and stored as the table `chunk_gaps` for request_facts, step_metrics and itl_cdf.
-- inputs: steady_req (steady_req.sql), chunks (chunk log)
-- params: none
-- One row per chunk of a steady request, so only narrow columns: the request's number (join
-- steady_req for its id, step and status), seq, tokens, and two facts. gap_ns and itl_s are
-- null for a request's first chunk.
SELECT *,
       -- the per-token ITL of contract §3, defined here once: the gap to the previous chunk
       -- shared by the chunk's tokens (null for a request's first chunk)
       gap_ns / 1e9 / tokens AS itl_s
FROM (
    SELECT
        r.req_no, c.seq, c.tokens,
        c."at" < r.sent_at OR c."at" > r.finished_at AS outside,
        epoch_ns(c."at") - epoch_ns(lag(c."at") OVER (PARTITION BY r.req_no ORDER BY c.seq)) AS gap_ns
    FROM chunks c JOIN steady_req r USING (request_id)
)
