-- name: interruptions
-- contract §3.8: interruptions.parquet, one row per interruption_notice of a spot run.
-- inputs (tables/views): events (this run's rows), steady (request log)
-- params: $run_id, $replica_known (some steady request names its replica)
-- A node's replicas are those whose replica_requested or replica_ready names the node in
-- `detail`. With `replica` unknown, in_flight_at_notice counts every request and `lost` those
-- with error spot_interruption; drain_s is then null. `lost` counts up to 30 s past the
-- interruption, or to the end of the records when the node survived. drain_s is the notice to
-- the last finished_at at or after it (0 when nothing on the node was still in flight).
WITH RECURSIVE ev AS (
    SELECT epoch_ns("at") AS t, kind, subject, detail FROM events
),
notices AS (
    SELECT row_number() OVER (ORDER BY n.t, n.subject) AS i, n.subject AS node, n.t AS notice,
           (SELECT min(e.t) FROM ev e WHERE e.kind = 'interruption' AND e.subject = n.subject
                                         AND e.t >= n.t) AS cut
    FROM ev n WHERE n.kind = 'interruption_notice'
),
on_node AS (
    SELECT DISTINCT detail AS node, subject AS replica
    FROM ev WHERE kind IN ('replica_requested', 'replica_ready') AND detail IS NOT NULL
),
req AS (
    SELECT request_id, replica, retry_of, status, error, epoch_ns(sent_at) AS s,
           epoch_ns(finished_at) AS f
    FROM steady
),
mine AS (   -- (notice, request) for the requests on the noticed node's replicas
    SELECT n.i, r.*
    FROM notices n JOIN req r
      ON CASE WHEN $replica_known
              THEN r.replica IN (SELECT o.replica FROM on_node o WHERE o.node = n.node)
              ELSE true END
),
lost AS (
    SELECT m.i, m.request_id
    FROM mine m JOIN notices n USING (i)
    WHERE m.status IS DISTINCT FROM 'ok'
      AND ($replica_known OR m.error = 'spot_interruption')
      AND m.f >= n.notice AND (n.cut IS NULL OR m.f <= n.cut + 30000000000)
),
-- resends follow retry_of chains: each lost request's descendants, any of them ok
chains AS (
    SELECT l.i, l.request_id AS root, l.request_id AS rid, 0 AS depth FROM lost l
    UNION ALL
    SELECT c.i, c.root, r.request_id, c.depth + 1
    FROM chains c JOIN req r ON r.retry_of = c.rid
    WHERE c.depth < 1000
),
retried AS (
    SELECT c.i, count(DISTINCT c.root) AS n
    FROM chains c JOIN req r ON r.request_id = c.rid
    WHERE c.depth > 0 AND r.status = 'ok'
    GROUP BY c.i
),
replacement AS (   -- the first replica_ready of a replica requested at or after the notice
    SELECT n.i, min(y.t) AS ready
    FROM notices n
    JOIN ev q ON q.kind = 'replica_requested' AND q.t >= n.notice
    JOIN ev y ON y.kind = 'replica_ready' AND y.subject = q.subject AND y.t >= q.t
    GROUP BY n.i
)
SELECT
    $run_id AS run_id, n.node,
    CAST(make_timestamp_ns(n.notice) AS TIMESTAMPTZ_NS) AS notice_at,
    CAST(make_timestamp_ns(n.cut) AS TIMESTAMPTZ_NS) AS interrupted_at,
    (SELECT count(*) FROM mine m WHERE m.i = n.i AND m.s <= n.notice AND n.notice < m.f)
        AS in_flight_at_notice,
    (SELECT count(*) FROM lost l WHERE l.i = n.i) AS lost,
    coalesce((SELECT r.n FROM retried r WHERE r.i = n.i), 0) AS retried_ok,
    CASE WHEN $replica_known
         THEN coalesce((SELECT (max(m.f) - n.notice) / 1e9 FROM mine m
                        WHERE m.i = n.i AND m.f >= n.notice), 0.0) END AS drain_s,
    (rp.ready - n.cut) / 1e9 AS replacement_ready_s
FROM notices n LEFT JOIN replacement rp USING (i)
ORDER BY n.notice, n.node
