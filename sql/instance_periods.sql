-- name: instance_periods
-- contract §5 rule 5, coverage: the distinct billing periods of the instance rows, in order.
-- inputs (views): bill
-- params: $instance_type, $spot (capacity spot: the SpotUsage usage types only, contract §3.8)
SELECT DISTINCT epoch_ns(period_start) AS start_ns, epoch_ns(period_end) AS end_ns
FROM bill
WHERE instance_type = $instance_type AND usage_unit = 'Hrs'
  AND (NOT $spot OR usage_type LIKE '%SpotUsage%')
ORDER BY start_ns, end_ns
