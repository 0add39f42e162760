"""One worker's share of a run's load, when several workers (processes or pods) drive it.

Closed loop: a step's concurrency is split as evenly as it goes (c=5 over 2 workers: 3 + 2);
when c is below the number of workers, the last workers send nothing in that step (c=1
over 2 workers: worker 0 alone). A step's request count is split in proportion to the
slots. Open loop: every worker draws the one seeded schedule and keeps the arrivals
whose index is its own modulo the number of workers, so the union is the one-worker
schedule. Multi-turn sessions and trace rows are dealt the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice

WORKER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class Share:
    index: int = 0
    count: int = 1
    name: str | None = None  # None: the only worker (unsharded files, `worker` column null)
    start_at_ns: int | None = None  # UTC epoch ns every worker starts at (the barrier)

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"worker index {self.index} is not in 0..{self.count - 1}")
        if self.name is not None and not WORKER_NAME.fullmatch(self.name):
            raise ValueError(f"worker name {self.name!r} is not [A-Za-z0-9_-]{{1,64}}")

    @property
    def alone(self) -> bool:
        return self.count == 1

    def concurrency(self, c: int) -> int:
        """This worker's slots of a closed-loop step of concurrency `c`."""
        return c // self.count + (1 if self.index < c % self.count else 0)

    def requests(self, total: int | None, c: int) -> int | None:
        """This worker's requests of a step bounded by `total` over concurrency `c`."""
        if total is None:
            return None
        # in proportion to the slots, so that every worker's part of the step takes as long
        slots = [Share(i, self.count).concurrency(c) for i in range(self.count)]
        parts = [total * s // c for s in slots]
        left = total - sum(parts)
        for i in range(self.count):
            if left and slots[i]:
                parts[i] += 1
                left -= 1
        return parts[self.index]

    def deal(self, seq: Sequence) -> list:
        """The items whose index is this worker's modulo the number of workers."""
        return list(seq[self.index::self.count])

    def deal_lazily(self, items: Iterable) -> Iterator:
        """`deal` one item at a time, for schedules drawn lazily (schedule.py `Drawn`): it
        reads its input to the end, so segments sharing a generator stay in step."""
        return islice(items, self.index, None, self.count)

    def dealt(self, n: int) -> int:
        """How many of `n` items `deal` gives this worker."""
        return len(range(self.index, n, self.count))
