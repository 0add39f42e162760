-- name: chunk_gaps
-- The chunks of steady requests, each with the gap to the chunk before it (by seq), read in
-- the chunk log's own order: the view `chunk_gaps` that chunk_req, step_metrics and itl_cdf
-- read (resources/analysis/chunks.py).
-- inputs: steady_req (steady_req.sql), chunks (chunk log)
-- params: none
-- Every writer of a chunk log writes a request's chunks together, seq ascending (the load
-- generator one finished request at a time, the merge of shards one shard after another,
-- the peers' imports one request at a time). In that order the chunk before a chunk is the
-- row before it: a streaming lag over the scan, where a window partitioned by request and
-- ordered by seq sorted every chunk row (most of a night-sized run's analysis). A gap is
-- taken only from a row of the same request whose seq is one less; any other row gets no
-- gap, so a log in another order never gives a wrong gap, only more rows without one.
-- chunk_req counts those per request (first_chunks): exactly one each means this view is the
-- by-seq definition row for row; otherwise chunks.py builds chunk_gaps_by_seq.sql instead.
-- One row per chunk of a steady request: its request's number (steady_req), seq, tokens, two
-- facts, the per-token ITL (itl_s.sql) and what the metrics filter on (step, ok, model), so
-- none of them joins steady_req again. gap_ns and itl_s are null for a request's first chunk.
SELECT r.req_no, c.seq, c.tokens,
       c."at" < r.sent_at OR c."at" > r.finished_at AS outside,
       c.gap_ns, itl_s(c.gap_ns, c.tokens) AS itl_s,
       r.step, r.ok, r.model
FROM (
    SELECT request_id, seq, "at", tokens,
           CASE WHEN lag(request_id) OVER () = request_id AND lag(seq) OVER () = seq - 1
                THEN epoch_ns("at") - epoch_ns(lag("at") OVER ()) END AS gap_ns
    FROM chunks
) c
JOIN steady_req r USING (request_id)
