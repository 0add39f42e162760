"""When the load generator's garbage collector may walk what: not the set-up's objects.

A collection stops the event loop for as long as it takes, and a chunk whose bytes arrive
meanwhile is stamped late. A full collection walks every tracked object: after the imports
(Arrow, httptools, the workload's prompts and bodies) hundreds of thousands, all of them
permanent. So at each step boundary (the barrier, before the step's clock starts) what is
alive is frozen (`gc.freeze()`: moved to a generation the collector never walks, in constant
time, no collection run), and the collections a step triggers walk only what was allocated
since. Nothing is collected at the boundary itself: a multi-worker barrier has a deadline,
and a full collection on a busy machine can take most of a second. Cyclic garbage alive at
a boundary waits for `run_ended`, which gives everything back to the collector.
Measured in benchmarks/loop_stalls.py (docs/performance.md).
"""

from __future__ import annotations

import gc


def between_steps() -> None:
    """Freeze what is alive now: later collections in the step do not walk it."""
    gc.freeze()


def run_ended() -> None:
    """The run's objects are the collector's again (a process may go on after a run)."""
    gc.unfreeze()
