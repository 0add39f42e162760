-- name: cost_per_1m
-- contract §4: one row per step → cost_per_1m.parquet.
-- inputs (views): metrics (step_metrics output, or one row for a whole episode), bill
--                 (contract §2.4), timeline (timeline.sql: the node intervals, §2.6)
-- params: $instance_type, $node_count, $hourly_usd_per_node, $price_region,
--         $purchase_option, $retrieved_on (from the manifest and its price_basis),
--         $node_events (the run has node events: its node count is the timeline's),
--         $spot (capacity spot: the instance rows are the SpotUsage usage types, §3.8)
-- Bill rows behind a step overlap its window. Instance rows: the manifest's instance type,
-- usage_unit 'Hrs'; per period the rate is Σ amount / Σ usage_quantity and the usage is
-- node_count × overlap hours, or with node events ∫ nodes(t) dt over the overlap. Other
-- hourly rows are prorated by overlap / period length.
-- Everything else (monthly fees, GB-month, one-offs) is listed apart, never prorated.
WITH behind AS (
    SELECT
        m.step, m.window_start, m.window_end, b.*,
        (epoch_ns(least(b.period_end, m.window_end))
            - epoch_ns(greatest(b.period_start, m.window_start))) / 3.6e12 AS overlap_h,
        (epoch_ns(b.period_end) - epoch_ns(b.period_start)) / 3.6e12 AS period_h,
        CASE
            WHEN b.instance_type = $instance_type AND b.usage_unit = 'Hrs'
                 AND (NOT $spot OR b.usage_type LIKE '%SpotUsage%') THEN 'instance'
            WHEN b.usage_unit = 'Hrs' THEN 'other_hourly'
            ELSE 'other'
        END AS kind
    FROM metrics m
    JOIN bill b ON b.period_start < m.window_end AND b.period_end > m.window_start
),
-- with node events: node-hours of the timeline inside each period's overlap with the window
node_usage AS (
    SELECT p.step, p.period_start, p.period_end,
           sum(overlap_ns(t.start_ns, t.end_ns,
                          epoch_ns(greatest(p.period_start, p.window_start)),
                          epoch_ns(least(p.period_end, p.window_end)))) / 3.6e12 AS node_h
    FROM (SELECT DISTINCT step, period_start, period_end, window_start, window_end
          FROM behind WHERE kind = 'instance') p
    JOIN timeline t ON t.kind = 'node'
    GROUP BY p.step, p.period_start, p.period_end
),
instance_periods AS (
    SELECT b.step, b.period_start, b.period_end,
           sum(b.amount) / NULLIF(sum(b.usage_quantity), 0) AS rate,
           CASE WHEN $node_events THEN coalesce(any_value(n.node_h), 0)
                ELSE any_value(b.overlap_h) * $node_count END AS usage_h
    FROM behind b LEFT JOIN node_usage n USING (step, period_start, period_end)
    WHERE b.kind = 'instance'
    GROUP BY b.step, b.period_start, b.period_end
),
-- the cross-check's mean node count over the step's window (§4: ∫ nodes(t) dt / window_s)
step_nodes AS (
    SELECT m.step,
           sum(overlap_ns(t.start_ns, t.end_ns, epoch_ns(m.window_start),
                          epoch_ns(m.window_end)))::DOUBLE
               / NULLIF(epoch_ns(m.window_end) - epoch_ns(m.window_start), 0) AS mean_nodes
    FROM metrics m JOIN timeline t ON t.kind = 'node'
    GROUP BY m.step, m.window_start, m.window_end
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
        CASE WHEN $node_events THEN coalesce(sn.mean_nodes, 0) * $hourly_usd_per_node
             ELSE CAST($node_count * $hourly_usd_per_node AS DOUBLE) END AS hourly_price_usd,
        coalesce(p.included, []) AS included,
        coalesce(p.excluded, []) AS excluded_items
    FROM metrics m
    LEFT JOIN per_step p USING (step)
    LEFT JOIN instance_cost ic USING (step)
    LEFT JOIN hourly_cost hc USING (step)
    LEFT JOIN step_nodes sn USING (step)
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
            -- billed_rate is per instance-hour already (Σ amount / Σ usage_quantity)
            CASE WHEN c.billed_rate IS NOT NULL AND $hourly_usd_per_node IS NOT NULL
                      AND abs(c.billed_rate / $hourly_usd_per_node - 1) > 0.01
                 THEN printf('billed instance rate %.4f USD/node-h differs from the price basis %.4f (a discount, spot or savings plan?)',
                             c.billed_rate, $hourly_usd_per_node) END,
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
