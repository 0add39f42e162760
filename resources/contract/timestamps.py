"""Timestamps of the contract: RFC 3339 strings with nanoseconds and `Z`, converted to and
from integer nanoseconds since the epoch, never through floats (a float loses nanoseconds
past 2^53 ns, i.e. after 1970-04-15)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_TS = re.compile(
    r"(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})"
)


def parse_ts(text: str) -> int:
    """RFC 3339 → integer ns since the epoch (UTC), exact to the nanosecond."""
    m = _TS.fullmatch(text) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    date, clock, frac, tz = m.groups()
    base = datetime.fromisoformat(f"{date}T{clock}{'+00:00' if tz == 'Z' else tz}")
    return int(base.timestamp()) * 1_000_000_000 + int((frac or "0").ljust(9, "0"))


def format_ts(ns: int) -> str:
    """Integer ns since the epoch → `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`."""
    secs, frac = divmod(int(ns), 1_000_000_000)
    return datetime.fromtimestamp(secs, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}Z"
