-- name: bill_usage
-- contract §5 rule 5, usage: per billing period of the instance rows that overlaps the steady
-- phase, the billed instance-hours against 0.95 × ∫ nodes(t) dt over the period's overlap
-- with the steady phase (usage missing) and 1.05 × max nodes(t) × the period's length, a node
-- counted from its node_requested (instances outside the scope: EC2 bills from launch, a node
-- is Ready minutes later). Without node events (§4) nodes(t) is the manifest's node_count
-- throughout: the bounds are node_count × overlap and node_count × period.
-- inputs (views): bill, timeline (timeline.sql: kinds 'node' and 'node_billed')
-- params: $instance_type, $spot (capacity spot: SpotUsage usage types only), $steady_start,
--         $steady_end (timestamps), $fixed_nodes (node_count without node events, else NULL)
WITH periods AS (
    SELECT period_start, period_end, sum(usage_quantity) AS usage_h, count(*) AS n_rows,
           epoch_ns(greatest(period_start, $steady_start)) AS o_start,
           epoch_ns(least(period_end, $steady_end)) AS o_end,
           (epoch_ns(least(period_end, $steady_end)) - epoch_ns(greatest(period_start, $steady_start)))
               / 3.6e12 AS overlap_h,
           (epoch_ns(period_end) - epoch_ns(period_start)) / 3.6e12 AS period_h
    FROM bill
    WHERE instance_type = $instance_type AND usage_unit = 'Hrs'
      AND (NOT $spot OR usage_type LIKE '%SpotUsage%')
      AND period_start < $steady_end AND period_end > $steady_start
    GROUP BY period_start, period_end
),
node_hours AS (   -- ∫ nodes(t) dt over the overlap, in hours
    SELECT p.period_start,
           CASE WHEN $fixed_nodes IS NOT NULL THEN $fixed_nodes * any_value(p.overlap_h)
                ELSE coalesce(sum(overlap_ns(t.start_ns, t.end_ns, p.o_start, p.o_end)), 0)
                     / 3.6e12
           END AS node_h
    FROM periods p LEFT JOIN timeline t ON t.kind = 'node' AND $fixed_nodes IS NULL
    GROUP BY p.period_start
),
-- the most nodes up at once in the period: the count is a step function that only rises at
-- an interval's start, so its maximum is at the period's start or at a start inside it
points AS (
    SELECT p.period_start, epoch_ns(p.period_start) AS t FROM periods p
    UNION
    SELECT p.period_start, b.start_ns
    FROM periods p JOIN timeline b ON b.kind = 'node_billed'
    WHERE b.start_ns > epoch_ns(p.period_start) AND b.start_ns < epoch_ns(p.period_end)
),
max_nodes AS (
    SELECT period_start, coalesce($fixed_nodes, max(n)) AS max_nodes
    FROM (SELECT x.period_start, x.t,
                 count(b.start_ns) AS n
          FROM points x LEFT JOIN timeline b
            ON b.kind = 'node_billed' AND b.start_ns <= x.t
           AND coalesce(b.end_ns, 9223372036854775807) > x.t
          GROUP BY x.period_start, x.t)
    GROUP BY period_start
)
SELECT
    row_number() OVER (ORDER BY p.period_start) - 1 AS _row,
    p.period_start, p.period_end, p.usage_h, p.overlap_h, p.period_h, p.n_rows,
    h.node_h, m.max_nodes,
    p.usage_h < 0.95 * h.node_h AS usage_missing,
    p.usage_h > 1.05 * m.max_nodes * p.period_h AS usage_outside_scope
FROM periods p JOIN node_hours h USING (period_start) JOIN max_nodes m USING (period_start)
ORDER BY _row
