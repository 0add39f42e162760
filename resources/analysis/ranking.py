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
