-- name: cost_per_1m
-- contract §4: one row per step → cost_per_1m.parquet.
-- inputs (views): metrics (step_metrics output), bill (contract §2.4)
-- params: $instance_type, $node_count, $hourly_usd_per_node, $price_region,
--         $purchase_option, $retrieved_on (from the manifest and its price_basis)
-- Bill rows behind a step overlap its window. Instance rows: the manifest's instance type,
-- usage_unit 'Hrs'; per period the rate is Σ amount / Σ usage_quantity and the usage is
-- node_count × overlap hours. Other hourly rows are prorated by overlap / period length.
-- Everything else (monthly fees, GB-month, one-offs) is listed apart, never prorated.
WITH behind AS (
    SELECT
        m.step, m.window_start, m.window_end, b.*,
        (epoch_ns(least(b.period_end, m.window_end))
            - epoch_ns(greatest(b.period_start, m.window_start))) / 3.6e12 AS overlap_h,
        (epoch_ns(b.period_end) - epoch_ns(b.period_start)) / 3.6e12 AS period_h,
        CASE
            WHEN b.instance_type = $instance_type AND b.usage_unit = 'Hrs' THEN 'instance'
            WHEN b.usage_unit = 'Hrs' THEN 'other_hourly'
            ELSE 'other'
        END AS kind
    FROM metrics m
    JOIN bill b ON b.period_start < m.window_end AND b.period_end > m.window_start
),
instance_periods AS (
    SELECT step, period_start, period_end,
           sum(amount) / NULLIF(sum(usage_quantity), 0) AS rate,
           any_value(overlap_h) * $node_count AS usage_h
    FROM behind WHERE kind = 'instance'
    GROUP BY step, period_start, period_end
),
instance_cost AS (
    SELECT step, sum(rate * usage_h) AS usd,
           sum(rate * usage_h) / NULLIF(sum(usage_h), 0) AS billed_rate
    FROM instance_periods GROUP BY step
),
hourly_cost AS (
    SELECT step, sum(amount * overlap_h / period_h) AS usd
    FROM behind WHERE kind = 'other_hourly' GROUP BY step
),
per_step AS (
    SELECT
        step,
        bool_or(estimated) AS any_estimated,
        list_sort(list_distinct(list(
            CASE
                WHEN kind = 'instance' THEN 'instance'
                WHEN kind = 'other' THEN NULL
                WHEN usage_type LIKE '%AmazonEKS%' OR service ILIKE '%Kubernetes%' THEN 'eks_control_plane'
                WHEN usage_type LIKE '%EBS:%' THEN 'storage'
                WHEN usage_type LIKE '%DataTransfer-%' THEN 'network'
                ELSE 'other'
            END))) AS included,
        list(struct_pack(service := service, usage_type := usage_type,
                         period_start := period_start, amount := amount)
             ORDER BY period_start, service, usage_type) FILTER (WHERE kind = 'other') AS excluded
    FROM behind GROUP BY step
),
bill_source AS (
    SELECT CASE WHEN count(DISTINCT source) = 1 THEN any_value(source) END AS bill_source FROM bill
),
costed AS (
    SELECT
        m.run_id, m.step, m.source, m.load_mode, m.target, m.output_tokens, m.output_tok_s,
        CASE WHEN p.any_estimated THEN 'provisional' ELSE 'final' END AS bill_status,
        coalesce(ic.usd, 0) + coalesce(hc.usd, 0) AS window_cost_usd,
        hc.usd AS other_hourly_usd,
        ic.billed_rate,
        CAST($node_count * $hourly_usd_per_node AS DOUBLE) AS hourly_price_usd,
        coalesce(p.included, []) AS included,
        coalesce(p.excluded, []) AS excluded_items
    FROM metrics m
    LEFT JOIN per_step p USING (step)
    LEFT JOIN instance_cost ic USING (step)
    LEFT JOIN hourly_cost hc USING (step)
),
rated AS (
    SELECT *,
        window_cost_usd / NULLIF(output_tokens, 0) * 1e6 AS cost_per_1m_output_usd,
        hourly_price_usd * 1e6 / NULLIF(output_tok_s * 3600, 0) AS cost_per_1m_via_rate_usd
    FROM costed
),
checked AS (
    SELECT *,
        (cost_per_1m_output_usd - cost_per_1m_via_rate_usd)
            / NULLIF(cost_per_1m_via_rate_usd, 0) AS cross_check_delta
    FROM rated
)
SELECT
    c.run_id, c.step, c.source, s.bill_source, c.bill_status, c.window_cost_usd,
    c.output_tokens, c.cost_per_1m_output_usd, c.hourly_price_usd, c.cost_per_1m_via_rate_usd,
    c.cross_check_delta,
    CASE
        WHEN c.cross_check_delta IS NULL AND c.hourly_price_usd IS NULL
            THEN 'no price basis in the manifest to cross-check against'
        WHEN c.cross_check_delta IS NULL THEN 'no output tokens or no window to cross-check'
        WHEN abs(c.cross_check_delta) <= 0.01 THEN NULL
        ELSE NULLIF(concat_ws('; ',
            CASE WHEN c.billed_rate IS NOT NULL AND $hourly_usd_per_node IS NOT NULL
                      AND abs(c.billed_rate / $node_count / $hourly_usd_per_node - 1) > 0.01
                 THEN printf('billed instance rate %.4f USD/node-h differs from the price basis %.4f (a discount, spot or savings plan?)',
                             c.billed_rate / $node_count, $hourly_usd_per_node) END,
            CASE WHEN c.other_hourly_usd > 0
                 THEN printf('the bill adds %.4f USD of other hourly items (e.g. EKS control plane)', c.other_hourly_usd) END,
            CASE WHEN c.billed_rate IS NULL THEN 'no instance rows behind the step' END
        ), '')
    END AS cross_check_note,
    c.included, c.excluded_items,
    CAST($price_region AS VARCHAR) AS price_region, CAST($purchase_option AS VARCHAR) AS purchase_option,
    CAST($retrieved_on AS VARCHAR) AS retrieved_on
FROM checked c, bill_source s
ORDER BY c.load_mode, c.target, c.step
