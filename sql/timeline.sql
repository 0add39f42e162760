-- name: timeline
-- contract §2.6: the run's timelines as intervals, stored as the table `timeline` that the
-- metrics (replicas_mean), the cost (§4's node integral), rule 5 and the episode outputs read.
-- inputs (tables): events (events.parquet, rows of the manifest's run_id only)
-- params: none
-- One row per interval [start_ns, end_ns) (end_ns null: still up when the records end):
--   kind 'replica': a replica_ready to the replica's first replica_stopped at or after it;
--   kind 'node': a node_ready to the node's first node_gone or interruption at or after it;
--   kind 'node_billed': the same node from its node_requested (EC2 bills from launch; a node
--     Ready minutes later), or from its node_ready when no request event precedes it; a node
--     requested and never ready is billed from its request to its end (rule 5's upper bound).
WITH ev AS (
    SELECT epoch_ns("at") AS t, kind, subject FROM events
),
ends AS (
    SELECT subject, t,
           CASE WHEN kind = 'replica_stopped' THEN 'replica' ELSE 'node' END AS of
    FROM ev WHERE kind IN ('replica_stopped', 'node_gone', 'interruption')
),
starts AS (
    SELECT subject, t, CASE WHEN kind = 'replica_ready' THEN 'replica' ELSE 'node' END AS of
    FROM ev WHERE kind IN ('replica_ready', 'node_ready')
),
ready AS (
    SELECT s.of AS kind, s.subject, s.t AS start_ns,
           (SELECT min(e.t) FROM ends e
            WHERE e.of = s.of AND e.subject = s.subject AND e.t >= s.t) AS end_ns
    FROM starts s
),
requested AS (
    SELECT subject, t FROM ev WHERE kind = 'node_requested'
),
billed AS (
    -- a ready node counted from the latest request of it at or before its ready
    SELECT 'node_billed' AS kind, r.subject,
           coalesce((SELECT max(q.t) FROM requested q
                     WHERE q.subject = r.subject AND q.t <= r.start_ns), r.start_ns) AS start_ns,
           r.end_ns
    FROM ready r WHERE r.kind = 'node'
    UNION ALL
    -- a node requested and never ready (before its end, if it has one)
    SELECT 'node_billed', q.subject, q.t,
           (SELECT min(e.t) FROM ends e WHERE e.of = 'node' AND e.subject = q.subject
                                          AND e.t >= q.t)
    FROM requested q
    WHERE NOT EXISTS (SELECT 1 FROM starts s WHERE s.of = 'node' AND s.subject = q.subject
                                                AND s.t >= q.t)
)
SELECT kind, subject, start_ns, end_ns FROM ready
UNION ALL
SELECT kind, subject, start_ns, end_ns FROM billed
