-- name: overlap_ns
-- How long interval [a0, a1) overlaps window [b0, b1), in the intervals' unit (ns): 0 when
-- they do not meet; a1 null is an interval still open when the records end (a replica or
-- node still up). The timelines' integrals (replicas_mean, the node-hours of the cost and the
-- price sheet's bill, an episode's buckets and totals, a model's awake time) all count with
-- it. A macro, created once on every analysis connection beside slo_met
-- (resources/analysis/rundir.py connect); its arguments are the calling query's expressions.
CREATE OR REPLACE MACRO overlap_ns(a0, a1, b0, b1) AS
    greatest(0, least(coalesce(a1, 9223372036854775807), b1) - greatest(a0, b0))
