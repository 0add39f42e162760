-- name: bill_facts
-- contract §5 rules 5 and 6, row level: one row per bill row with its scope facts.
-- inputs (views): bill
-- params: $account_id, $region, $run_id, $instance_type (from the manifest; may be null)
-- Null on the bill side is "another" scope for account, region and tag value (the row
-- names no scope we asked for); a null or 'NoInstanceType' instance type is not "other".
SELECT
    row_number() OVER (ORDER BY period_start, service, usage_type) - 1 AS _row,
    period_start, period_end, source,
    account_id IS DISTINCT FROM $account_id AS other_account,
    region IS DISTINCT FROM $region AS other_region,
    tag_value IS DISTINCT FROM $run_id AS other_tag,
    instance_type IS NOT NULL AND instance_type <> 'NoInstanceType'
        AND instance_type IS DISTINCT FROM $instance_type AS other_instance_type,
    unit IS DISTINCT FROM 'USD' AS not_usd,
    coalesce(instance_type = $instance_type AND usage_unit = 'Hrs', false) AS is_instance
FROM bill
ORDER BY _row
