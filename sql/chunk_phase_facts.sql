-- name: chunk_phase_facts
-- contract §5 rule 3 on the chunk log: chunk rows whose run_id is not the manifest's, and
-- orphan chunk rows (request_id in neither request log). Only these counts and a few
-- example request ids leave DuckDB; a row that is both counts once.
-- inputs (views): chunks (chunk log), warmup, steady (request logs)
-- params: $run_id (the manifest's), $max_examples
WITH known AS (
    SELECT request_id FROM warmup UNION SELECT request_id FROM steady
),
flagged AS (
    SELECT c.request_id,
           NOT coalesce(c.run_id = $run_id, false) AS foreign_run,
           k.request_id IS NULL AS orphan
    FROM chunks c LEFT JOIN known k ON c.request_id = k.request_id
),
bad AS (
    SELECT * FROM flagged WHERE foreign_run OR orphan
)
SELECT
    count(*) AS offending,
    count(*) FILTER (WHERE foreign_run) AS foreign_rows,
    count(*) FILTER (WHERE orphan) AS orphan_rows,
    coalesce((SELECT list(DISTINCT request_id ORDER BY request_id)[1:$max_examples]
              FROM bad WHERE request_id IS NOT NULL), []) AS examples
FROM bad
