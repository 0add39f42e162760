-- name: chunk_gaps
-- The chunks of steady requests, each with the gap to the chunk before it (by seq), computed
-- once and stored as the temp table `chunk_gaps` for request_facts and step_metrics.
-- inputs (views): steady (request log, phase = steady), chunks (chunk log)
-- params: none
-- req_no numbers the steady requests (partitioning on an integer is cheaper than on a UUID
-- string); gap_ns is null for a request's first chunk.
WITH req AS (
    SELECT row_number() OVER () AS req_no, request_id, step, status = 'ok' AS ok,
           sent_at, finished_at
    FROM steady
)
SELECT
    r.req_no, r.request_id, r.step, r.ok, c.seq, c.tokens,
    c."at" < r.sent_at OR c."at" > r.finished_at AS outside,
    epoch_ns(c."at") - epoch_ns(lag(c."at") OVER (PARTITION BY r.req_no ORDER BY c.seq)) AS gap_ns
FROM chunks c JOIN req r USING (request_id)
