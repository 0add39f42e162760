-- name: scale_events
-- contract §3.7: scale_events.parquet, one row per scale_decision whose desired count differs
-- from the one before it (the previous decision's, or replicas.initial). Its new nodes and
-- replicas are those requested at or after it and before the next scale_decision.
-- inputs (tables/views): events (this run's rows), steady (request log)
-- params: $run_id, $initial (replicas.initial, else 1), $slo_ttft_s, $slo_tpot_s (§3's
--         attainment rule)
WITH ev AS (
    SELECT epoch_ns("at") AS t, kind, subject, value, detail FROM events
),
decisions AS (
    SELECT t, CAST(round(value) AS BIGINT) AS desired,
           coalesce(CAST(round(lag(value) OVER (ORDER BY t)) AS BIGINT), $initial) AS before,
           lead(t) OVER (ORDER BY t) AS next_t
    FROM ev WHERE kind = 'scale_decision' AND value IS NOT NULL
),
changed AS (
    SELECT row_number() OVER (ORDER BY t) AS d, t, before, desired, next_t,
           CASE WHEN desired > before THEN 'up' ELSE 'down' END AS direction
    FROM decisions WHERE desired <> before
),
new_of AS (   -- (decision, kind, subject, requested at) of its new nodes and replicas
    SELECT c.d, e.kind, e.subject, e.t
    FROM changed c JOIN ev e
      ON e.kind IN ('node_requested', 'replica_requested') AND e.t >= c.t
     AND (c.next_t IS NULL OR e.t < c.next_t)
),
node_ready AS (
    SELECT n.d, min(e.t) AS t
    FROM new_of n JOIN ev e ON e.kind = 'node_ready' AND e.subject = n.subject AND e.t >= n.t
    WHERE n.kind = 'node_requested' GROUP BY n.d
),
replica_ready AS (
    SELECT n.d, min(e.t) AS t
    FROM new_of n JOIN ev e ON e.kind = 'replica_ready' AND e.subject = n.subject AND e.t >= n.t
    WHERE n.kind = 'replica_requested' GROUP BY n.d
),
first_replica AS (   -- the decision's first new replica (earliest request, then name)
    SELECT d, arg_min(subject, (t, subject)) AS subject, min(t) AS t
    FROM new_of WHERE kind = 'replica_requested' GROUP BY d
),
phases AS (   -- the values of its first replica_phase event of each phase
    SELECT f.d,
           arg_min(e.value, e.t) FILTER (WHERE e.detail = 'image_pull') AS image_pull_s,
           arg_min(e.value, e.t) FILTER (WHERE e.detail = 'weights_load') AS weights_load_s,
           arg_min(e.value, e.t) FILTER (WHERE e.detail = 'compile') AS compile_s,
           arg_min(e.value, e.t) FILTER (WHERE e.detail = 'graph_capture') AS graph_capture_s
    FROM first_replica f JOIN ev e ON e.kind = 'replica_phase' AND e.subject = f.subject
                                  AND e.t >= f.t
    GROUP BY f.d
),
first_token AS (
    SELECT n.d, min(epoch_ns(s.first_token_at)) AS t
    FROM new_of n JOIN steady s ON s.replica = n.subject
    WHERE n.kind = 'replica_requested' AND s.first_token_at IS NOT NULL
    GROUP BY n.d
),
req AS (
    SELECT epoch_ns(sent_at) AS snt,
           slo_met(status = 'ok', (epoch_ns(first_token_at) - epoch_ns(sent_at)) / 1e9,
                   (epoch_ns(last_token_at) - epoch_ns(first_token_at)) / 1e9
                   / (output_tokens - 1), output_tokens, $slo_ttft_s, $slo_tpot_s) AS good
    FROM steady WHERE sent_at IS NOT NULL
),
-- the attainment windows [lo, hi) by sent_at: before [d - 60 s, d); for up, during
-- [d, replica ready) and after [replica ready, + 60 s); for down, after [d, d + 60 s)
windows AS (
    SELECT c.d, 'before' AS w, c.t - 60000000000 AS lo, c.t AS hi FROM changed c
    UNION ALL
    SELECT c.d, 'during', c.t, r.t FROM changed c JOIN replica_ready r USING (d)
    WHERE c.direction = 'up'
    UNION ALL
    SELECT c.d, 'after', r.t, r.t + 60000000000 FROM changed c JOIN replica_ready r USING (d)
    WHERE c.direction = 'up'
    UNION ALL
    SELECT c.d, 'after', c.t, c.t + 60000000000 FROM changed c WHERE c.direction = 'down'
),
attain AS (
    SELECT w.d,
           avg(CASE WHEN coalesce(r.good, false) THEN 1.0 ELSE 0.0 END) FILTER (WHERE w.w = 'before') AS before,
           avg(CASE WHEN coalesce(r.good, false) THEN 1.0 ELSE 0.0 END) FILTER (WHERE w.w = 'during') AS during,
           avg(CASE WHEN coalesce(r.good, false) THEN 1.0 ELSE 0.0 END) FILTER (WHERE w.w = 'after') AS after
    FROM windows w JOIN req r ON r.snt >= w.lo AND r.snt < w.hi
    GROUP BY w.d
)
SELECT
    $run_id AS run_id, CAST(make_timestamp_ns(c.t) AS TIMESTAMPTZ_NS) AS decided_at,
    c.before AS from_replicas, c.desired AS to_replicas, c.direction,
    (nr.t - c.t) / 1e9 AS node_ready_s,
    CASE WHEN c.direction = 'up' THEN (rr.t - c.t) / 1e9 END AS replica_ready_s,
    (ft.t - c.t) / 1e9 AS first_token_s,
    p.image_pull_s, p.weights_load_s, p.compile_s, p.graph_capture_s,
    a.before AS attainment_before, a.during AS attainment_during, a.after AS attainment_after
FROM changed c
LEFT JOIN node_ready nr USING (d)
LEFT JOIN replica_ready rr USING (d)
LEFT JOIN first_token ft USING (d)
LEFT JOIN phases p USING (d)
LEFT JOIN attain a USING (d)
ORDER BY c.t
