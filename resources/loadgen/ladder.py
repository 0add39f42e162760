"""Load until the curve bends: a step ladder that keeps raising the load until the output
throughput stops rising.

From `start`, each next step is the last one × `factor` (closed loop: at least one request
more), run as an ordinary steady step `c=<N>` or `rate=<R>`. After each step the analysis
says (through the `judge` callback given to run_load; the records are flushed first) whether
it was valid and what output tokens/s it reached. The ladder stops after the step that

  * was invalid (contract §3: errors, achieved concurrency, schedule lag, client-limited),
  * gained less than `min_gain` (default 5 %) output tokens/s over the step before it, or
  * reached `max` (no step above it is ever run).

So the high-throughput end of a frontier is measured, one step past the bend, never guessed.
The load generator only records: the throughput and the validity are the analysis' figures.
This module is the ladder itself (what the config names); ladder_steps.py runs its steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servingbench.resources.loadgen.errors import LoadConfigError

OVER = ("concurrency", "rate")
KEYS = ("over", "start", "factor", "max", "min_gain")


@dataclass(frozen=True)
class Ladder:
    over: str = "concurrency"
    start: float = 1
    factor: float = 2.0
    max: float = 256
    min_gain: float = 0.05

    def __post_init__(self) -> None:
        if self.over not in OVER:
            raise LoadConfigError(f"ladder.over: {self.over!r} is not one of {', '.join(OVER)}")
        for key in ("start", "factor", "max", "min_gain"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise LoadConfigError(f"ladder.{key}: expected a finite number, got {v!r}")
        if self.start <= 0 or self.max < self.start:
            raise LoadConfigError(f"ladder: expected 0 < start <= max, got start={self.start!r}, "
                                  f"max={self.max!r}")
        if self.over == "concurrency" and not all(
                float(v).is_integer() for v in (self.start, self.max)):
            raise LoadConfigError("ladder: start and max are whole requests in flight over "
                                  "concurrency")
        if self.factor <= 1:
            raise LoadConfigError(f"ladder.factor: must be > 1, got {self.factor!r}")
        if not 0 <= self.min_gain < 10:
            raise LoadConfigError(f"ladder.min_gain: expected a fraction like 0.05, got "
                                  f"{self.min_gain!r}")

    def next(self, load: float) -> float | None:
        """The step after `load`, or None past `max`."""
        if self.over == "concurrency":
            nxt = max(int(load) + 1, math.floor(load * self.factor))
        else:
            nxt = float(f"{load * self.factor:.4g}")
        return nxt if nxt <= self.max else None

    def targets(self) -> list[float]:
        """Every step the ladder may run, in order (it stops earlier at the bend)."""
        out, load = [], self.start if self.over == "rate" else int(self.start)
        while load is not None:
            out.append(load)
            load = self.next(load)
        return out


def stop_reason(ladder: Ladder, valid: bool, tok_s: float | None,
                before: float | None) -> str | None:
    """Why the ladder stops after a step, or None to go on."""
    if not valid or tok_s is None:
        return "the step was invalid"
    if before is not None and before > 0 and tok_s < before * (1 + ladder.min_gain):
        return (f"output throughput {tok_s:,.1f} tok/s gained less than "
                f"{ladder.min_gain:.0%} over {before:,.1f} tok/s")
    return None
