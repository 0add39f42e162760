-- name: billed_node_hours
-- The node-hours a run's nodes were billed for inside [$start_ns, $end_ns): each node of the
-- timeline's `node_billed` intervals (timeline.sql: from its node_requested, EC2 billing from
-- launch, to its first node_gone or interruption) over the window. Null when the run has no
-- node event (every node was up the whole window: the manifest's node_count counts then).
-- inputs (tables): timeline
-- params: start_ns, end_ns
SELECT CASE WHEN count(*) = 0 THEN NULL
            ELSE sum(overlap_ns(start_ns, end_ns, $start_ns, $end_ns)) / 3.6e12 END AS node_hours
FROM timeline WHERE kind = 'node_billed'
