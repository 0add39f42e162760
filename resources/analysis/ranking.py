"""The one ranking of candidates on cost: what the comparison report, the demo's terminal
headline and the store's `ranking` all show, so they cannot drift.

Among each candidate's headline row for one SLO (contract §4): first the candidates that
meet the SLO, measured ones cheapest first (a missing cost last), then emulated ones the
same way; then those that meet no step, or trail their quality reference (quality parity:
shown, never ranked on cost); then those not measured validly (`meets_slo` null); last
those without a headline row. Only a measured candidate that meets the SLO and did not fail
quality parity gets a rank number; emulated rows are never ranked against measured ones.
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
    def ranked(self) -> bool:
        """Whether it gets a rank number: measured, meets the SLO, passed quality parity."""
        return self.meets is True and not self.emulated and not self.failed_parity

    def key(self) -> tuple:
        if self.headline is None:
            return (4, 0.0, self.candidate)
        if self.meets is None:
            return (3, 0.0, self.candidate)
        if self.failed_parity or not self.meets:
            return (2, 0.0, self.candidate)
        cost = self.headline.get("cost_per_1m_output_usd")
        cost = math.inf if cost is None or (isinstance(cost, float) and math.isnan(cost)) else float(cost)
        return (1 if self.emulated else 0, cost, self.candidate)


def rank(standings: Iterable[Standing]) -> list[tuple[Standing, int | None]]:
    """The standings in ranking order, each with its rank number (None: not ranked)."""
    out: list[tuple[Standing, int | None]] = []
    n = 0
    for s in sorted(standings, key=Standing.key):
        n += s.ranked
        out.append((s, n if s.ranked else None))
    return out
