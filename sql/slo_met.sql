-- name: slo_met
-- contract §3's SLO rule for one request, written once: OK, its TTFT (from sent_at) within
-- the TTFT SLO, and its TPOT within the TPOT SLO unless it has fewer than 2 output tokens
-- (no TPOT). Goodput and slo_attainment (step_metrics), the episode's buckets, totals and
-- the attainment around each scale event count requests with it. A macro, created once on
-- every analysis connection (resources/analysis/rundir.py connect); its arguments are
-- expressions of the calling query, so it binds no value itself.
CREATE OR REPLACE MACRO slo_met(ok, ttft_s, tpot_s, output_tokens, slo_ttft_s, slo_tpot_s) AS
    ok AND ttft_s <= slo_ttft_s AND (tpot_s <= slo_tpot_s OR output_tokens < 2)
