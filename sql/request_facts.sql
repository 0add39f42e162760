-- name: request_facts
-- contract §5 rules 1, 2 and 4: one row per steady request with the chunk-level facts the
-- gates validate (chunk work stays here, in DuckDB; only per-request rows leave).
-- inputs (views): steady (request log, phase = steady), steady_req (steady_req.sql),
--                 chunk_req (chunk_req.sql), chunks (chunk log: only for repeated ids)
-- params: none
-- order_violation names every broken pair of scheduled ≤ sent ≤ first ≤ last ≤ finished.
-- Each request row is judged with the chunk rows carrying its request_id, each counted once
-- (contract §5): chunk_req counts chunks per request row, so a request_id that repeats
-- (rule 3's business) takes one row's count, never the sum over its repeats; and for such an
-- id (a shard left beside its merged file repeats its chunk rows too) the chunk sum is taken
-- over distinct chunk rows. Only repeated ids reach the chunk log a second time.
WITH per_request AS (
    SELECT r.request_id,
           max(p.n_chunks) AS n_chunks,
           max(p.chunk_tokens) AS chunk_tokens,
           max(p.chunks_out_of_order) AS chunks_out_of_order,
           max(p.chunks_outside) AS chunks_outside
    FROM chunk_req p JOIN steady_req r USING (req_no)
    GROUP BY r.request_id
),
repeated AS (
    SELECT request_id FROM steady_req GROUP BY request_id HAVING count(*) > 1
),
once AS (
    SELECT request_id, count(*) AS n_chunks, sum(tokens) AS chunk_tokens
    FROM (SELECT DISTINCT request_id, seq, "at", tokens FROM chunks
          WHERE request_id IN (SELECT request_id FROM repeated))
    GROUP BY request_id
)
SELECT
    row_number() OVER () - 1 AS _row,
    s.request_id, s.status, s.output_tokens_source,
    s.scheduled_at, s.sent_at, s.first_token_at, s.last_token_at, s.finished_at,
    s.output_tokens,
    CAST(coalesce(o.n_chunks, p.n_chunks, 0) AS BIGINT) AS n_chunks,
    CAST(coalesce(o.chunk_tokens, p.chunk_tokens, 0) AS BIGINT) AS chunk_tokens,
    CAST(coalesce(p.chunks_out_of_order, 0) AS BIGINT) AS chunks_out_of_order,
    CAST(coalesce(p.chunks_outside, 0) AS BIGINT) AS chunks_outside,
    -- contract §5 rule 2 over every pair of the chain whose both sides are present
    -- (a null side is rule 1's business), so a failed request's sent/finished still count.
    NULLIF(concat_ws('; ',
        CASE WHEN s.sent_at < s.scheduled_at THEN 'sent_at before scheduled_at' END,
        CASE WHEN s.first_token_at < s.scheduled_at THEN 'first_token_at before scheduled_at' END,
        CASE WHEN s.last_token_at < s.scheduled_at THEN 'last_token_at before scheduled_at' END,
        CASE WHEN s.finished_at < s.scheduled_at THEN 'finished_at before scheduled_at' END,
        CASE WHEN s.first_token_at < s.sent_at THEN 'first_token_at before sent_at' END,
        CASE WHEN s.last_token_at < s.sent_at THEN 'last_token_at before sent_at' END,
        CASE WHEN s.finished_at < s.sent_at THEN 'finished_at before sent_at' END,
        CASE WHEN s.last_token_at < s.first_token_at THEN 'last_token_at before first_token_at' END,
        CASE WHEN s.finished_at < s.first_token_at THEN 'finished_at before first_token_at' END,
        CASE WHEN s.finished_at < s.last_token_at THEN 'finished_at before last_token_at' END
    ), '') AS order_violation
FROM steady s LEFT JOIN per_request p USING (request_id) LEFT JOIN once o USING (request_id)
ORDER BY _row
