"""The one ranking of candidates on cost: what the comparison report, the demo's terminal
headline and the store's `ranking` all show, so they cannot drift.

Among each candidate's headline row for one SLO (contract §4): first the candidates that
meet the SLO, measured ones cheapest first (a missing cost last), then emulated ones the
same way; then those that meet no step, or trail their quality reference (quality parity:
shown, never ranked on cost); then those not measured validly (`meets_slo` null); last
those without a headline row. Only a measured candidate that meets the SLO with a cost and
did not fail quality parity gets a rank number; emulated rows are never ranked against
measured ones. The numbers follow the policy of frontier_levels (contract §3.6, SQL's
`rank()`): equal costs share the lower rank and the next one skips as many places.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Standing:
    """One candidate as the ranking sees it. `ref` is the caller's own object (a report's
    run, a store row), handed back beside the rank."""

    candidate: str
    headline: dict | None  # its headline row for the SLO (None: no headline)
    emulated: bool
    failed_parity: bool = False
    ref: Any = None
    # an emulated figure's error band (the emulator's cross-validated relative error against
    # published measurements); None: measured, or no band known
    band: float | None = None

    @property
    def meets(self) -> bool | None:
        """contract §4 meets_slo; a null (or NaN, as read back through pandas) stays None."""
        if self.headline is None:
            return None
        value = self.headline.get("meets_slo")
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return None
        return bool(value)

    @property
    def cost(self) -> float | None:
        """Its headline cost per 1M output tokens; a null (or NaN) is None."""
        cost = None if self.headline is None else self.headline.get("cost_per_1m_output_usd")
        return None if cost is None or (isinstance(cost, float) and math.isnan(cost)) else float(cost)

    @property
    def ranked(self) -> bool:
        """Whether it gets a rank number: measured, meets the SLO with a cost, passed quality
        parity."""
        return (self.meets is True and self.cost is not None and not self.emulated
                and not self.failed_parity)

    def key(self) -> tuple:
        if self.headline is None:
            return (4, 0.0, self.candidate)
        if self.meets is None:
            return (3, 0.0, self.candidate)
        if self.failed_parity or not self.meets:
            return (2, 0.0, self.candidate)
        return (1 if self.emulated else 0, math.inf if self.cost is None else self.cost,
                self.candidate)


def rank(standings: Iterable[Standing]) -> list[tuple[Standing, int | None]]:
    """The standings in ranking order, each with its rank number (None: not ranked)."""
    out: list[tuple[Standing, int | None]] = []
    n, last = 0, None  # ranked so far, and the (cost, rank) of the last ranked
    for s in sorted(standings, key=Standing.key):
        place = None
        if s.ranked:
            n += 1
            place = last[1] if last is not None and last[0] == s.cost else n
            last = (s.cost, place)
        out.append((s, place))
    return out


def overlap(a: float, band_a: float | None, b: float, band_b: float | None) -> bool:
    """Whether two emulated figures lie within each other's error bands (a ± band_a · a
    meets b ± band_b · b); an unknown band never overlaps."""
    if band_a is None or band_b is None:
        return False
    return a * (1 - band_a) <= b * (1 + band_b) and b * (1 - band_b) <= a * (1 + band_a)


def within_bands(ranked: Iterable[tuple[Standing, int | None]]) -> list[tuple[Standing, Standing]]:
    """Neighbours in the ranking order among the emulated candidates that meet the SLO with
    a cost whose costs lie within each other's error bands: the emulator cannot say which of
    the two is cheaper, so no winner is named between them."""
    cands = [s for s, _ in ranked if s.emulated and s.meets is True and s.cost is not None
             and not s.failed_parity]
    return [(a, b) for a, b in zip(cands, cands[1:], strict=False)
            if overlap(a.cost, a.band, b.cost, b.band)]
