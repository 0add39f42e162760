-- name: ttft_samples
-- ttft_samples: client-side TTFT of every ok steady request, per step (contract §3 ttft_s_*).
-- inputs: relation `requests` (steady_state_request_log, contract §2.2). params: none.
-- Durations from integer nanoseconds, never through a microsecond cast.
SELECT step,
       (epoch_ns(first_token_at) - epoch_ns(sent_at)) / 1e9 AS ttft_s
FROM requests
WHERE phase = 'steady'
  AND status = 'ok'
  AND sent_at IS NOT NULL
  AND first_token_at IS NOT NULL
ORDER BY step, ttft_s
