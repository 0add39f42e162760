-- name: event_phase_facts
-- contract §2.6 / §5 rule 3 on events.parquet: event rows whose run_id is not the manifest's
-- (every output ignores them); each counts once, examples are the event's time and kind.
-- inputs (tables): events_all (every row of events.parquet; empty without the file)
-- params: $run_id (the manifest's), $max_examples
SELECT
    count(*) AS offending,
    coalesce(list(epoch_ns("at") ORDER BY "at", kind)[1:$max_examples], []) AS at_ns,
    coalesce(list(coalesce(kind, 'null') ORDER BY "at", kind)[1:$max_examples], []) AS kinds
FROM events_all
WHERE run_id IS DISTINCT FROM $run_id
