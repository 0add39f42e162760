-- name: pareto
-- contract §3.6's frontier rule, written here only: the points of one run (frontier.sql's
-- rows, for frontier.parquet) or of several pooled (a sweep's members on one instance type,
-- as the comparison's plots and `servingbench sweep frontier` draw one line of them).
-- inputs (views): points (any columns, among them valid, interactivity_tok_s and
--                 output_tok_s_per_accel; ord: the row order to keep; ranked: false for a
--                 point that is never on a frontier, its run having failed quality parity)
-- params: none
-- A point is on the frontier when it is valid, ranked, both of its coordinates are known,
-- and no other such point is at least as good on both with one strictly better: identical
-- points (ties) are all on it; an invalid point never is, and dominates nothing.
WITH eligible AS (
    SELECT ord, interactivity_tok_s AS x, output_tok_s_per_accel AS y
    FROM points
    WHERE coalesce(valid, false) AND coalesce(ranked, true)
          AND interactivity_tok_s IS NOT NULL AND output_tok_s_per_accel IS NOT NULL
)
SELECT
    p.* EXCLUDE (ord, ranked),
    p.ord IN (
        SELECT c.ord FROM eligible c
        WHERE NOT EXISTS (
            SELECT 1 FROM eligible o
            WHERE o.x >= c.x AND o.y >= c.y AND (o.x > c.x OR o.y > c.y))
    ) AS on_frontier
FROM points p
ORDER BY p.ord
