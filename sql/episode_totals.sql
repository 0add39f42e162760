-- name: episode_totals
-- contract §3.7: the whole-episode figures of episode.json that come from the records: the
-- steady requests and their SLO attainment, the replica-seconds and node-seconds over the
-- steady phase, the idle replica-seconds, the largest cold start of a replica that became
-- ready inside it, and the OK requests' output tokens (the episode's cost per 1M).
-- inputs (tables/views): steady (request log), timeline, events (this run's rows)
-- params: $start_ns, $end_ns (the steady phase), $slo_ttft_s, $slo_tpot_s, $fixed_replicas,
--         $fixed_nodes (the counts without replica / node events, else null)
-- Idle: a ready replica (from its replica_ready to its replica_stopped: a draining replica
-- counts until it stops) with no request in flight on it, a request being in flight on its
-- `replica` over [sent_at, finished_at]. Without replica events each replica named in the
-- log is ready over the whole phase, and the fixed count's unnamed rest idle throughout.
-- Requests naming no replica (or one the events never made ready) are on none.
WITH req AS (
    SELECT replica, epoch_ns(sent_at) AS s, epoch_ns(finished_at) AS f, status = 'ok' AS ok,
           output_tokens,
           slo_met(status = 'ok', (epoch_ns(first_token_at) - epoch_ns(sent_at)) / 1e9,
                   (epoch_ns(last_token_at) - epoch_ns(first_token_at)) / 1e9
                   / (output_tokens - 1), output_tokens, $slo_ttft_s, $slo_tpot_s) AS good
    FROM steady
),
named AS (
    SELECT DISTINCT replica FROM req WHERE replica IS NOT NULL
),
ready AS (   -- each replica's ready intervals, inside the steady phase
    SELECT subject AS replica, greatest(start_ns, $start_ns) AS r0,
           least(coalesce(end_ns, 9223372036854775807), $end_ns) AS r1
    FROM timeline
    WHERE kind = 'replica' AND $fixed_replicas IS NULL
      AND start_ns < $end_ns AND coalesce(end_ns, 9223372036854775807) > $start_ns
    UNION ALL
    SELECT replica, $start_ns, $end_ns FROM named WHERE $fixed_replicas IS NOT NULL
),
busy_parts AS (   -- each request's in-flight stretch inside a ready interval of its replica
    SELECT y.replica, y.r0, greatest(q.s, y.r0) AS s, least(q.f, y.r1) AS f
    FROM req q JOIN ready y ON q.replica = y.replica AND q.s < y.r1 AND q.f > y.r0
),
ordered AS (
    SELECT *, max(f) OVER (PARTITION BY replica, r0 ORDER BY s, f
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
    FROM busy_parts
),
islands AS (   -- overlapping stretches merged: a new island where a stretch starts past reach
    SELECT *, sum(CASE WHEN reach IS NULL OR s > reach THEN 1 ELSE 0 END)
                  OVER (PARTITION BY replica, r0 ORDER BY s, f ROWS UNBOUNDED PRECEDING) AS island
    FROM ordered
),
busy AS (
    SELECT sum(f1 - s0) AS ns
    FROM (SELECT replica, r0, island, min(s) AS s0, max(f) AS f1 FROM islands GROUP BY ALL)
),
ready_ns AS (
    SELECT coalesce(sum(r1 - r0), 0) AS ns, count(DISTINCT replica) AS n FROM ready
),
nodes AS (
    SELECT coalesce(sum(overlap_ns(start_ns, end_ns, $start_ns, $end_ns)), 0) AS ns
    FROM timeline WHERE kind = 'node'
),
replica_time AS (
    SELECT coalesce(sum(overlap_ns(start_ns, end_ns, $start_ns, $end_ns)), 0) AS ns
    FROM timeline WHERE kind = 'replica'
),
cold AS (   -- replica_requested → replica_ready of each replica ready inside the phase
    SELECT max(r.t - (SELECT max(epoch_ns(q."at")) FROM events q
                      WHERE q.kind = 'replica_requested' AND q.subject = r.subject
                        AND epoch_ns(q."at") <= r.t)) / 1e9 AS s
    FROM (SELECT subject, epoch_ns("at") AS t FROM events WHERE kind = 'replica_ready') r
    WHERE r.t >= $start_ns AND r.t <= $end_ns
)
SELECT
    (SELECT count(*) FROM req) AS requests,
    (SELECT count(*) FILTER (WHERE ok) FROM req) AS ok,
    (SELECT count(*) FILTER (WHERE good) / count(*) FROM req) AS slo_attainment,
    CAST((SELECT sum(output_tokens) FILTER (WHERE ok) FROM req) AS BIGINT) AS output_tokens,
    CASE WHEN $fixed_replicas IS NOT NULL
         THEN $fixed_replicas * ($end_ns - $start_ns) / 1e9
         ELSE (SELECT ns FROM replica_time) / 1e9 END AS replica_seconds,
    CASE WHEN (SELECT count(*) FROM named) = 0 THEN NULL
         WHEN $fixed_replicas IS NOT NULL
         THEN ((SELECT ns FROM ready_ns) - coalesce((SELECT ns FROM busy), 0)
               + greatest(0, $fixed_replicas - (SELECT n FROM ready_ns)) * ($end_ns - $start_ns)) / 1e9
         ELSE ((SELECT ns FROM ready_ns) - coalesce((SELECT ns FROM busy), 0)) / 1e9
    END AS idle_replica_seconds,
    CASE WHEN $fixed_nodes IS NOT NULL
         THEN $fixed_nodes * ($end_ns - $start_ns) / 3.6e12
         ELSE (SELECT ns FROM nodes) / 3.6e12 END AS node_hours,
    (SELECT s FROM cold) AS cold_start_s_max
