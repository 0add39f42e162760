"""The progress display: a rewritten line on a TTY, plain lines otherwise, or a callback."""

from __future__ import annotations

import io

from servingbench.resources.loadgen.progress import Progress, make_progress
from servingbench.resources.loadgen.records import Request


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _done(ttft_ms: int, status: str = "ok") -> Request:
    r = Request("id", "steady", "c=2", "concurrency", 2.0, 0)
    r.sent, r.status = 0, status
    if status == "ok":
        r.chunk_at, r.chunk_tokens = [ttft_ms * 1_000_000], [3]
    return r


def test_tty_rewrites_one_line_and_ends_the_step_on_its_own_line():
    out = _Tty()
    p = Progress(out=out)
    p.step_start("c=2", 3)
    for ttft in (10, 30, 20):
        p.request_done(_done(ttft))
    p.request_done(_done(0, "http_error"))
    p.tick()
    p.step_end("c=2", ["loop lag p99 9.0 ms > 5 ms"])
    text = out.getvalue()
    assert text.startswith("\r\x1b[2K") and "4/3 requests" in text and "errors 1" in text
    assert "p50 TTFT 20 ms" in text  # display only: the analyzer computes the metrics
    assert text.rstrip("\n").endswith("CLIENT-LIMITED: loop lag p99 9.0 ms > 5 ms")


def test_plain_lines_when_not_a_tty_and_callback_snapshots():
    out = io.StringIO()
    p = Progress(out=out)
    p.step_start("rate=4", None)
    p.request_done(_done(10))
    p.tick()  # too soon for another plain line
    p.step_end("rate=4", [])
    assert "\r" not in out.getvalue() and out.getvalue().count("\n") == 1
    assert "1/? requests" in out.getvalue()
    seen = []
    q = make_progress(seen.append)
    q.step_start("c=1", 1)
    q.request_done(_done(10))
    q.tick()
    q.step_end("c=1", [])
    assert [s["done"] for s in seen] == [1, 1] and seen[-1]["finished"] is True
    assert seen[0]["ttft_p50_s"] == 0.01
