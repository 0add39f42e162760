-- name: itl_s
-- contract §3's per-token inter-token latency of one chunk, written once: the gap to the
-- chunk before it (ns) shared by the chunk's tokens, in seconds; null for a request's first
-- chunk (no gap). Both ways of building chunk_gaps (chunk_gaps.sql, chunk_gaps_by_seq.sql)
-- compute it with this macro, created beside them (resources/analysis/chunks.py).
CREATE OR REPLACE MACRO itl_s(gap_ns, tokens) AS gap_ns / 1e9 / tokens
