"""The load generator's watch on itself, per step (contract §2.1 `steps[]`).

A step is `client_limited` when the client, not the server, may have been the limit:
event-loop lag p99 > 5 ms, client CPU > 90 % of one core, closed-loop concurrency kept
in flight < 90 % of the target while issuing, or open-loop scheduling lag p99 > 10 ms.
These are checks on the instrument, not contract §3 metrics.
"""

from __future__ import annotations

import asyncio
import time

LOOP_LAG_P99_MAX_S = 0.005
CPU_SHARE_MAX = 0.90
CONCURRENCY_MIN_SHARE = 0.90
SCHED_LAG_P99_MAX_S = 0.010
_TICK_S = 0.01


def p99(values: list[float]) -> float | None:
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * 0.99
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


class InFlight:
    """Time-weighted count of requests in flight (closed loop), while the step issues."""

    def __init__(self, target: int | None = None) -> None:
        self.target = target  # the slots this process kept (its share of the step's c)
        self.n = 0
        self.area = 0
        self.last = time.perf_counter_ns()
        self.t0 = self.last
        self.stopped_at: int | None = None

    def _tick(self) -> None:
        now = time.perf_counter_ns()
        if self.stopped_at is None:
            self.area += self.n * (now - self.last)
        self.last = now

    def inc(self) -> None:
        self._tick()
        self.n += 1

    def dec(self) -> None:
        self._tick()
        self.n -= 1

    def stop(self) -> None:
        self._tick()
        self.stopped_at = self.last

    def mean(self) -> float | None:
        end = self.stopped_at or time.perf_counter_ns()
        return self.area / (end - self.t0) if end > self.t0 else None


class SelfWatch:
    def __init__(self) -> None:
        self.lags: list[float] = []
        self.sched_lags: list[float] = []
        self._task: asyncio.Task | None = None
        self._cpu0 = self._wall0 = 0.0
        self.cpu_share: float | None = None
        self.loop_lag_p99_s: float | None = None

    async def _sample(self) -> None:
        # perf_counter, not loop.time(): uvloop's loop clock is cached at millisecond steps
        while True:
            due = time.perf_counter() + _TICK_S
            await asyncio.sleep(_TICK_S)
            self.lags.append(max(0.0, time.perf_counter() - due))

    def start(self) -> None:
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
        self._task = asyncio.get_running_loop().create_task(self._sample())

    async def stop(self) -> None:
        wall = time.perf_counter() - self._wall0
        cpu = time.process_time() - self._cpu0
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self.cpu_share = cpu / wall if wall > 0 else None
        self.loop_lag_p99_s = p99(self.lags)

    def verdict(self, load_mode: str, target: float, in_flight_mean: float | None) -> tuple[bool, list[str]]:
        why = []
        if self.loop_lag_p99_s is not None and self.loop_lag_p99_s > LOOP_LAG_P99_MAX_S:
            why.append(f"loop lag p99 {self.loop_lag_p99_s * 1e3:.1f} ms > 5 ms")
        if self.cpu_share is not None and self.cpu_share > CPU_SHARE_MAX:
            why.append(f"client CPU {self.cpu_share:.0%} of a core > 90 %")
        if load_mode == "concurrency" and in_flight_mean is not None and in_flight_mean < CONCURRENCY_MIN_SHARE * target:
            why.append(f"kept {in_flight_mean:.1f} in flight < 90 % of {target:g}")
        lag = p99(self.sched_lags)
        if load_mode == "rate" and lag is not None and lag > SCHED_LAG_P99_MAX_S:
            why.append(f"scheduling lag p99 {lag * 1e3:.1f} ms > 10 ms")
        return bool(why), why
