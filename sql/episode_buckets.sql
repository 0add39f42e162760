-- name: episode_buckets
-- contract §3.7: episode.parquet, one row per bucket of the steady phase. Bucket k is
-- [start + k·b, start + (k+1)·b), the last one ends at the phase's end (shorter when needed,
-- never empty); a record falls in the bucket holding its timestamp, the phase's end itself
-- in the last bucket (the last request of a run whose phase ends with it); records outside
-- the phase fall in none.
-- inputs (views): steady (request log), chunks (chunk log), steady_req, timeline (§2.6)
-- params: $run_id, $start_ns, $end_ns (the steady phase), $bucket_ns, $n_buckets,
--         $slo_ttft_s, $slo_tpot_s (§3's attainment rule), $fixed_replicas, $fixed_nodes
--         (the counts of a run without replica / node events, else null)
WITH buckets AS (
    SELECT k, $start_ns + k * $bucket_ns AS b0,
           least($start_ns + (k + 1) * $bucket_ns, $end_ns) AS b1
    FROM range(0, $n_buckets) t(k)
),
req AS (
    SELECT epoch_ns(scheduled_at) AS sch, epoch_ns(sent_at) AS snt,
           epoch_ns(finished_at) AS fin, status = 'ok' AS ok, retry_of,
           (epoch_ns(first_token_at) - epoch_ns(sent_at)) / 1e9 AS ttft,
           CASE WHEN output_tokens >= 2
                THEN (epoch_ns(last_token_at) - epoch_ns(first_token_at)) / 1e9 / (output_tokens - 1)
           END AS tpot,
           output_tokens
    FROM steady
),
-- the bucket of a time stamp t (ns): (t - start) // b inside the phase, the last at its end
offered AS (
    SELECT CASE WHEN sch = $end_ns THEN $n_buckets - 1 ELSE (sch - $start_ns) // $bucket_ns END AS k,
           count(*) AS n
    FROM req WHERE retry_of IS NULL AND sch >= $start_ns AND sch <= $end_ns GROUP BY k
),
completed AS (
    SELECT CASE WHEN fin = $end_ns THEN $n_buckets - 1 ELSE (fin - $start_ns) // $bucket_ns END AS k,
           count(*) AS n
    FROM req WHERE ok AND fin >= $start_ns AND fin <= $end_ns GROUP BY k
),
sent AS (
    SELECT CASE WHEN snt = $end_ns THEN $n_buckets - 1 ELSE (snt - $start_ns) // $bucket_ns END AS k,
           count(*) AS n,
           quantile_cont(ttft, [0.50, 0.99]) FILTER (WHERE ok) AS ttft_q,
           count(*) FILTER (WHERE slo_met(ok, ttft, tpot, output_tokens, $slo_ttft_s,
                                          $slo_tpot_s)) AS n_good
    FROM req WHERE snt >= $start_ns AND snt <= $end_ns GROUP BY k
),
tokens AS (
    SELECT CASE WHEN t = $end_ns THEN $n_buckets - 1 ELSE (t - $start_ns) // $bucket_ns END AS k,
           sum(c.tokens) AS n
    FROM (SELECT epoch_ns(c."at") AS t, c.tokens
          FROM chunks c SEMI JOIN steady_req r ON c.request_id = r.request_id) c
    WHERE t >= $start_ns AND t <= $end_ns GROUP BY k
),
-- ∫ count(t) dt over each bucket, from the timeline's intervals of one kind
replica_ns AS (
    SELECT b.k, sum(overlap_ns(t.start_ns, t.end_ns, b.b0, b.b1))::DOUBLE AS ns
    FROM buckets b JOIN timeline t ON t.kind = 'replica' GROUP BY b.k
),
node_ns AS (
    SELECT b.k, sum(overlap_ns(t.start_ns, t.end_ns, b.b0, b.b1))::DOUBLE AS ns
    FROM buckets b JOIN timeline t ON t.kind = 'node' GROUP BY b.k
)
SELECT
    $run_id AS run_id,
    CAST(make_timestamp_ns(b.b0) AS TIMESTAMPTZ_NS) AS bucket_start,
    CAST(make_timestamp_ns(b.b1) AS TIMESTAMPTZ_NS) AS bucket_end,
    coalesce(o.n, 0) / ((b.b1 - b.b0) / 1e9) AS offered_rps,
    coalesce(c.n, 0) / ((b.b1 - b.b0) / 1e9) AS completed_rps,
    coalesce(tk.n, 0) / ((b.b1 - b.b0) / 1e9) AS output_tok_s,
    coalesce(CAST($fixed_replicas AS DOUBLE), coalesce(rn.ns, 0) / (b.b1 - b.b0)) AS replicas_ready,
    coalesce(CAST($fixed_nodes AS DOUBLE), coalesce(nn.ns, 0) / (b.b1 - b.b0)) AS nodes,
    coalesce(s.n, 0) AS n_requests,
    s.ttft_q[1] AS ttft_s_p50, s.ttft_q[2] AS ttft_s_p99,
    s.n_good / s.n AS slo_attainment
FROM buckets b
LEFT JOIN offered o USING (k)
LEFT JOIN completed c USING (k)
LEFT JOIN sent s USING (k)
LEFT JOIN tokens tk USING (k)
LEFT JOIN replica_ns rn USING (k)
LEFT JOIN node_ns nn USING (k)
ORDER BY b.k
