-- name: steady_req
-- The steady requests numbered once, stored as the table `steady_req` that chunk_gaps.sql and
-- its readers join on: the chunk-level table then carries a 4-byte request number instead of
-- the request id and the step (at 128 chunks a request, those two strings were most of its
-- bytes).
-- inputs (views): steady (request log, phase = steady)
-- params: none
-- req_no is an integer: partitioning and joining on it is cheaper than on a UUID string.
-- `model` (contract §2.2, null but in a run with several models) lets the metrics of §3.9
-- take one model's chunks.
SELECT CAST(row_number() OVER () AS INTEGER) AS req_no, request_id, step, status = 'ok' AS ok,
       sent_at, finished_at, model
FROM steady
