"""Signals around a run: the caller's SIGTERM/SIGINT handlers put back when it ends, and the
event loop it runs on."""

from __future__ import annotations

import asyncio
import signal
import threading


class SavedSignals:
    """The process's SIGTERM/SIGINT handlers and wakeup fd, put back when a run ends.

    The event loop installs its own for the run, and on closing resets them to the
    defaults, not to what was there: without this, a caller's handler (Dagster's, a
    CLI's teardown) would be gone for the rest of the process.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.main = threading.current_thread() is threading.main_thread()
        self.handlers = {s: signal.getsignal(s) for s in self.SIGNALS} if self.main else {}
        self.wakeup_fd = -1
        if self.main:
            self.wakeup_fd = signal.set_wakeup_fd(-1)
            signal.set_wakeup_fd(self.wakeup_fd)

    def restore(self) -> None:
        if not self.main:
            return
        for sig, handler in self.handlers.items():
            if handler is not None:  # None: installed outside Python, cannot be put back
                signal.signal(sig, handler)
        signal.set_wakeup_fd(self.wakeup_fd)


def event_loop_runner():
    try:
        import uvloop
        return asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:  # pragma: no cover - uvloop is a pinned dependency
        return asyncio.Runner()
