-- name: bill_usage
-- contract §5 rule 5, usage: per billing period of the instance rows that overlaps the steady
-- phase, the billed instance-hours against node_count × overlap (usage missing) and
-- node_count × period length (instances outside the scope).
-- inputs (views): bill
-- params: $instance_type, $node_count, $spot (capacity spot: SpotUsage usage types only),
--         $steady_start, $steady_end (timestamps)
WITH periods AS (
    SELECT period_start, period_end, sum(usage_quantity) AS usage_h, count(*) AS n_rows,
           (epoch_ns(least(period_end, $steady_end)) - epoch_ns(greatest(period_start, $steady_start)))
               / 3.6e12 AS overlap_h,
           (epoch_ns(period_end) - epoch_ns(period_start)) / 3.6e12 AS period_h
    FROM bill
    WHERE instance_type = $instance_type AND usage_unit = 'Hrs'
      AND (NOT $spot OR usage_type LIKE '%SpotUsage%')
      AND period_start < $steady_end AND period_end > $steady_start
    GROUP BY period_start, period_end
)
SELECT
    row_number() OVER (ORDER BY period_start) - 1 AS _row,
    period_start, period_end, usage_h, overlap_h, period_h, n_rows,
    usage_h < 0.95 * $node_count * overlap_h AS usage_missing,
    usage_h > 1.05 * $node_count * period_h AS usage_outside_scope
FROM periods
ORDER BY _row
