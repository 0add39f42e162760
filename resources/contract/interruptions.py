"""A spot run's interruption schedule (a candidate's `interruptions`, contract §3.8): fixed
times or a seeded Poisson process, in seconds from the start of the steady phase. The EKS
run starts an AWS FIS experiment at each (resources/cluster/fis.py); the embedded default
gives one emulator replica its notice (resources/model_server/fleet/replicated.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Interruptions:
    """contract §2.1 `interruptions`: fixed times, or a Poisson process of `rate_per_hour`
    drawn from `seed` (the same seed gives the same times)."""

    at: tuple[float, ...] = ()
    rate_per_hour: float | None = None
    seed: int = 0

    @classmethod
    def of(cls, doc: dict) -> Interruptions:
        if not isinstance(doc, dict):
            raise ValueError("interruptions: expected a mapping {at: [...]} or "
                             "{rate_per_hour, seed}")
        unknown = set(doc) - {"at", "rate_per_hour", "seed"}
        if unknown:
            raise ValueError(f"interruptions: unknown key(s) {sorted(unknown)}")
        if ("at" in doc) == ("rate_per_hour" in doc):
            raise ValueError("interruptions: give either `at` or `rate_per_hour` (with `seed`)")
        if "at" in doc:
            at = tuple(float(t) for t in doc["at"])
            if any(t < 0 for t in at):
                raise ValueError("interruptions.at: times are seconds >= 0 into the steady phase")
            return cls(at=tuple(sorted(at)))
        rate = float(doc["rate_per_hour"])
        if not rate > 0:
            raise ValueError("interruptions.rate_per_hour must be > 0")
        return cls(rate_per_hour=rate, seed=int(doc.get("seed", 0)))

    def times(self, duration_s: float) -> list[float]:
        """The interruption times inside a steady phase of `duration_s` seconds."""
        if self.rate_per_hour is None:
            return [t for t in self.at if t < duration_s]
        rng, out, t = random.Random(self.seed), [], 0.0
        while True:
            t += rng.expovariate(self.rate_per_hour / 3600.0)
            if t >= duration_s:
                return out
            out.append(round(t, 3))
