"""Several load workers for one run: local worker processes (`--workers N`), or one worker
of several started elsewhere (a Kubernetes pod: `--worker-index I --worker-count N
--start-at T`).

Local workers are spawned processes (the `spawn` start method: no forked event loop or
open sockets), each with its own event loop, clock and self-watch, writing its own shards.
Before each step every worker meets the others at a barrier: it sends the parent what it
recorded of the last step and waits for a start instant in UTC, which it maps onto its own
perf_counter clock (once per run) and sleeps until. The parent scrapes the engine's
/metrics once around each step (not once per worker), merges the workers' verdicts (a step
is client-limited if any worker was, or if a worker died during it or before it), and at the end merges
the shards into the run's files (shards.py). A worker that dies is named in the manifest's
`workers` list and its records up to its last flush (every 0.25 s) are kept.

A pod has no parent to meet: it starts its first step at `--start-at` (StartAt), and
before every later step it meets the other pods through the run's S3 prefix
(`--barrier-uri`, podsync.PodSync), so no pod starts a step while another still runs the
one before. Without `--barrier-uri` (or alone) it runs its later steps back to back.

Modules: share.py (the split of a step's load), barriers.py (StartAt, PipeSync),
local.py (the parent of local worker processes), worker.py (one worker of several: its
run and a pod's summary), podsync.py (pods meet over the run's S3 prefix), shards.py
(merging the workers' shards into the run's files).
"""
