-- name: phase_facts
-- contract §5 rule 3: both request logs stacked, with what the phase rule needs per row.
-- inputs (views): warmup, steady (request logs)
-- params: $run_id (the manifest's)
-- A null run_id is not the manifest's: it counts as foreign.
WITH both_logs AS (
    SELECT run_id, request_id, phase, 'warmup' AS file_phase, sent_at, finished_at FROM warmup
    UNION ALL
    SELECT run_id, request_id, phase, 'steady' AS file_phase, sent_at, finished_at FROM steady
)
SELECT
    row_number() OVER () - 1 AS _row,
    request_id, phase, file_phase, sent_at,
    coalesce(phase, '') = file_phase AS phase_matches_file,
    coalesce(run_id = $run_id, false) AS run_id_matches,
    CASE WHEN file_phase = 'steady' THEN (SELECT max(finished_at) FROM warmup) END AS warmup_end
FROM both_logs
ORDER BY _row
