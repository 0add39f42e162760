-- name: chunk_gaps_by_seq
-- chunk_gaps.sql's rows for a chunk log whose requests' chunks are not each together in seq
-- order (a hand-made log, a shard left beside its merged file): each chunk's gap to the
-- chunk before it by seq, from a window partitioned by request and ordered by seq, stored
-- as the table `chunk_gaps` (resources/analysis/chunks.py). Same columns, same definition.
-- inputs: steady_req (steady_req.sql), chunks (chunk log)
-- params: none
SELECT req_no, seq, tokens, outside, gap_ns, itl_s(gap_ns, tokens) AS itl_s, step, ok, model
FROM (
    SELECT
        r.req_no, c.seq, c.tokens,
        c."at" < r.sent_at OR c."at" > r.finished_at AS outside,
        epoch_ns(c."at") - epoch_ns(lag(c."at") OVER (PARTITION BY r.req_no ORDER BY c.seq)) AS gap_ns,
        r.step, r.ok, r.model
    FROM chunks c JOIN steady_req r USING (request_id)
)
