-- name: cost_what_if
-- contract §4.1: one row per step × price basis of the manifest → cost_what_if.parquet.
-- inputs (views): metrics (step_metrics output), bases (ord, basis, hourly_usd_per_node,
--                 price_source, retrieved_on, region: the manifest's price_bases)
-- params: $node_count
-- What the step's tokens would cost bought another way: node_count × hourly price × the
-- step's window, per 1M output (and total) tokens. A what-if figure, never the bill.
SELECT
    m.run_id, m.step, b.basis, b.hourly_usd_per_node, b.price_source, b.retrieved_on,
    b.region,
    $node_count * b.hourly_usd_per_node * m.window_s / 3600
        / NULLIF(m.output_tokens, 0) * 1e6 AS cost_per_1m_output_usd,
    $node_count * b.hourly_usd_per_node * m.window_s / 3600
        / NULLIF(m.input_tokens + m.output_tokens, 0) * 1e6 AS cost_per_1m_total_usd,
    m.source
FROM metrics m
CROSS JOIN bases b
ORDER BY m.load_mode, m.target, m.step, b.ord
