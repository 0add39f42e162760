-- name: chunk_facts
-- What the chunk rows say, counted in one pass over chunk_gaps and stored as the table
-- `chunk_facts`: each steady request's chunk facts (per_request: the rows chunk_req.sql
-- reads, for rules 2 and 4 and the order check of resources/analysis/chunks.py), and the
-- per-token ITL's histogram of 10 µs buckets per step and model (the rows step_metrics.sql
-- reads: its percentiles, mean, extremes and the share of chunks bundling tokens).
-- inputs: chunk_gaps (chunk_gaps.sql or chunk_gaps_by_seq.sql)
-- params: none
-- One pass for both: a streaming pass over a night-sized chunk log is most of its analysis.
-- first_chunks: a request's chunks without a gap. itl_chunk: a chunk of contract §3's ITL
-- (seq >= 1 of an ok request); its bucket b is null when it has no gap (counted in n_chunks
-- and n_multi only).
WITH g AS (
    SELECT req_no, tokens, gap_ns, outside, itl_s, step, model,
           ok AND seq >= 1 AS itl_chunk,
           CAST(floor(itl_s * 1e5) AS BIGINT) AS b
    FROM chunk_gaps
)
SELECT GROUPING(req_no) = 0 AS per_request,
       req_no, step, model, itl_chunk, b,
       count(*) AS n_chunks,
       sum(tokens) AS chunk_tokens,
       count(*) FILTER (WHERE gap_ns < 0) AS chunks_out_of_order,
       count(*) FILTER (WHERE outside) AS chunks_outside,
       count(*) FILTER (WHERE gap_ns IS NULL) AS first_chunks,
       sum(itl_s * tokens) AS itl_w_sum,
       min(itl_s) AS itl_min,
       max(itl_s) AS itl_max,
       count(*) FILTER (WHERE tokens > 1) AS n_multi
FROM g
GROUP BY GROUPING SETS ((req_no), (step, model, itl_chunk, b))
