"""Statistics the benchmarks share (scripts in this folder import it by name: the folder
of the script being run is on sys.path)."""

from __future__ import annotations


def pct(values: list[float], q: float) -> float | None:
    """The q-quantile, interpolated linearly between order statistics (numpy's default, and
    DuckDB's quantile_cont, as the contract's metrics are); None over no values."""
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)
