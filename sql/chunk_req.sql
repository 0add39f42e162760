-- name: chunk_req
-- The chunk-level facts of each steady request (a row a request, from chunk_facts.sql): the
-- view `chunk_req` that request_facts.sql reads for rules 2 and 4.
-- inputs: chunk_facts (chunk_facts.sql)
-- params: none
-- first_chunks: the chunks without a gap. One for every request when chunk_gaps read the log
-- in seq order (resources/analysis/chunks.py checks it).
SELECT req_no, n_chunks, chunk_tokens, chunks_out_of_order, chunks_outside, first_chunks
FROM chunk_facts
WHERE per_request
