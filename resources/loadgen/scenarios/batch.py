"""A batch job (the throughput workload): every request is submitted at once and at most
`max_in_flight` are outstanding, so the job is one closed-loop step `c=<max_in_flight>`
of exactly `requests` requests. Its makespan and cost go to job.json (contract §3.4),
which the analyzer computes from the records."""

from __future__ import annotations

from servingbench.resources.loadgen.config import step_name
from servingbench.resources.loadgen.scenarios.kind import Key, Kind, pos_int

# the throughput job: long in, short out
KIND = Kind("batch", order=4, keys={
    "requests": Key(64, pos_int),
    "max_in_flight": Key(16, pos_int),
}, default_targets={"input_tokens": 4096, "output_tokens": 64},
    # one queue drained as fast as the server allows: not split across workers yet
    own_steps=True, one_worker=True)


async def steady(run) -> None:
    s = run.cfg.scenario
    name = step_name("concurrency", s.max_in_flight)

    async def drive():
        return await run.closed("steady", s.max_in_flight, s.requests, None)

    await run.run_step(name, "concurrency", float(s.max_in_flight), s.requests, drive)


PLUGIN = KIND  # what this file adds to the scenarios package
