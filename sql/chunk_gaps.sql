-- name: chunk_gaps
-- The chunks of steady requests, each with the gap to the chunk before it (by seq), computed
-- once and stored as the temp table `chunk_gaps` for request_facts and step_metrics.
-- inputs (views): steady (request log, phase = steady), chunks (chunk log)
-- params: none
-- req_no numbers the steady requests (partitioning on an integer is cheaper than on a UUID
-- string); gap_ns and itl_s are null for a request's first chunk.
WITH req AS (
    SELECT row_number() OVER () AS req_no, request_id, step, status = 'ok' AS ok,
           sent_at, finished_at
    FROM steady
)
SELECT *,
       -- the per-token ITL of contract §3, defined here once: the gap to the previous chunk
       -- shared by the chunk's tokens (null for a request's first chunk)
       gap_ns / 1e9 / tokens AS itl_s
FROM (
    SELECT
        r.req_no, r.request_id, r.step, r.ok, c.seq, c.tokens, c."at",
        c."at" < r.sent_at OR c."at" > r.finished_at AS outside,
        epoch_ns(c."at") - epoch_ns(lag(c."at") OVER (PARTITION BY r.req_no ORDER BY c.seq)) AS gap_ns
    FROM chunks c JOIN req r USING (request_id)
)
