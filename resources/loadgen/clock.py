"""One monotonic clock (`perf_counter_ns`) mapped to UTC once per run (contract §2 clock rule)."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Clock:
    anchor_utc_ns: int
    anchor_perf_ns: int

    @classmethod
    def start(cls) -> Clock:
        perf0 = time.perf_counter_ns()
        utc = time.time_ns()
        perf1 = time.perf_counter_ns()
        return cls(anchor_utc_ns=utc, anchor_perf_ns=(perf0 + perf1) // 2)

    @property
    def offset_ns(self) -> int:
        """Add to a perf_counter_ns reading to get UTC epoch ns."""
        return self.anchor_utc_ns - self.anchor_perf_ns

    def utc(self, perf_ns: int) -> int:
        return perf_ns + self.offset_ns

    def now_utc(self) -> int:
        return self.utc(time.perf_counter_ns())
