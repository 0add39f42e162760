-- name: chunk_req
-- The chunk-level facts of each steady request, counted once over chunk_gaps and stored as
-- the table `chunk_req` (a row a request) that request_facts.sql reads for rules 2 and 4.
-- inputs: chunk_gaps (chunk_gaps.sql or chunk_gaps_by_seq.sql)
-- params: none
-- first_chunks: the chunks without a gap. One for every request when chunk_gaps read the log
-- in seq order (resources/analysis/chunks.py checks it).
SELECT req_no,
       count(*) AS n_chunks,
       sum(tokens) AS chunk_tokens,
       count(*) FILTER (WHERE gap_ns < 0) AS chunks_out_of_order,
       count(*) FILTER (WHERE outside) AS chunks_outside,
       count(*) FILTER (WHERE gap_ns IS NULL) AS first_chunks
FROM chunk_gaps
GROUP BY req_no
