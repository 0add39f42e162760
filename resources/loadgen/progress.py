"""A per-step progress display: one rewritten line on a TTY, plain lines otherwise.

The running p50 TTFT here is for the operator's eyes only; metrics come from the
analyzer (contract §3), never from the load side.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

PLAIN_EVERY_S = 5.0


class NoProgress:
    def step_start(self, name: str, total: int | None) -> None: ...
    def request_done(self, req) -> None: ...
    def tick(self) -> None: ...
    def step_end(self, name: str, why_limited: list[str]) -> None: ...
    def close(self) -> None: ...


class Progress(NoProgress):
    def __init__(self, out=None, sink: Callable[[dict], None] | None = None) -> None:
        self.out = out if out is not None else sys.stderr
        self.sink = sink
        self.tty = sink is None and hasattr(self.out, "isatty") and self.out.isatty()
        self.name, self.total = "", None
        self._reset()

    def _reset(self) -> None:
        self.done = self.errors = self.tokens = 0
        self.ttfts: list[float] = []
        self.t0 = self.last_plain = time.monotonic()

    def step_start(self, name: str, total: int | None) -> None:
        self.name, self.total = name, total
        self._reset()

    def request_done(self, req) -> None:
        self.done += 1
        if req.status != "ok":
            self.errors += 1
        self.tokens += sum(req.chunk_tokens)
        if req.chunk_at and req.sent is not None and len(self.ttfts) < 100_000:
            self.ttfts.append((req.chunk_at[0] - req.sent) / 1e9)

    def snapshot(self) -> dict:
        el = max(time.monotonic() - self.t0, 1e-9)
        return {"step": self.name, "done": self.done, "total": self.total, "errors": self.errors,
                "tok_s": self.tokens / el, "ttft_p50_s": statistics.median(self.ttfts) if self.ttfts else None,
                "elapsed_s": el}

    def _line(self) -> str:
        s = self.snapshot()
        total = "?" if s["total"] is None else s["total"]
        ttft = "-" if s["ttft_p50_s"] is None else f"{s['ttft_p50_s'] * 1e3:.0f} ms"
        return (f"{s['step']:<12} {s['done']}/{total} requests  {s['tok_s']:,.0f} tok/s  "
                f"errors {s['errors']}  p50 TTFT {ttft}  {s['elapsed_s']:.0f} s")

    def tick(self) -> None:
        if self.sink is not None:
            self.sink(self.snapshot())
        elif self.tty:
            self.out.write("\r\x1b[2K" + self._line())
            self.out.flush()
        elif time.monotonic() - self.last_plain >= PLAIN_EVERY_S:
            self.last_plain = time.monotonic()
            print(self._line(), file=self.out, flush=True)

    def step_end(self, name: str, why_limited: list[str]) -> None:
        if self.sink is not None:
            self.sink({**self.snapshot(), "finished": True, "client_limited": why_limited})
            return
        end = "\r\x1b[2K" if self.tty else ""
        note = f"  CLIENT-LIMITED: {'; '.join(why_limited)}" if why_limited else ""
        print(end + self._line() + "  done" + note, file=self.out, flush=True)


def make_progress(progress: bool | Callable[[dict], None]) -> NoProgress:
    if progress is True:
        return Progress()
    if callable(progress):
        return Progress(sink=progress)
    return NoProgress()
