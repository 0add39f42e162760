"""The barriers a worker of several meets before each step: `StartAt` (a pod's first step
at an absolute instant, the rest back to back) and `PipeSync` (a local worker reports to
its parent and waits for the start instant it sends). A pod's meetings with the other pods
are podsync.py. Each maps the UTC instant onto the worker's own perf_counter clock."""

from __future__ import annotations

import asyncio
import time
from multiprocessing.connection import Connection

_now = time.perf_counter_ns


async def sleep_until(target: int) -> int:
    while (now := _now()) < target:
        await asyncio.sleep((target - now) / 1e9)
    return target


class StartAt:
    """The first step starts at the absolute instant, the rest back to back: a pod alone or
    without a place to meet; PodSync uses it for its first step."""

    def __init__(self, start_at_ns: int) -> None:
        self.start_at_ns, self.done = start_at_ns, False
        self.late_s: float | None = None
        # what a pod's summary says of its meetings (PodSync's): none without a place to meet
        self.meetings: list[dict] = []
        self.left_behind: dict | None = None

    def leave(self) -> None:
        """Nothing to tell: no other pod waits for this one (PodSync.leave does)."""

    async def __call__(self, run, label: str) -> int:
        if self.done:
            return _now()
        self.done = True
        target = self.start_at_ns - run.clock.offset_ns
        self.late_s = max(0.0, (_now() - target) / 1e9)
        return await sleep_until(target)


class PipeSync:
    """A local worker's barrier: report to the parent, wait for its start instant."""

    def __init__(self, conn: Connection) -> None:
        self.conn, self.sent = conn, 0

    async def __call__(self, run, label: str) -> int:
        new, self.sent = run.steps[self.sent:], len(run.steps)
        done = sum(run.statuses.values())
        tally = (done, done - run.statuses.get("ok", 0), run.tokens)
        self.conn.send(("sync", label, new, dict(run.phases), bool(run.emulated), tally))
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        fd = self.conn.fileno()
        # the loop waits on the pipe (a blocking recv in a thread would outlive a cancel)
        loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
        try:
            await ready
        finally:
            loop.remove_reader(fd)
        msg = self.conn.recv()
        return await sleep_until(msg[1] - run.clock.offset_ns)
