"""The scheduler-slice hint: accepted where the kernel has it, visible via sched_getattr."""

from __future__ import annotations

import ctypes
import multiprocessing
import platform
import struct

import pytest
from servingbench.emulator import latency


def _child(q) -> None:
    ok = latency.set_slice(200_000)
    buf = ctypes.create_string_buffer(56)
    nr = {"x86_64": 315, "aarch64": 275}.get(platform.machine())
    got = None
    if ok and nr is not None:
        ctypes.CDLL(None).syscall(nr, 0, buf, 56, 0)
        got = struct.unpack("IIQiIQQQII", buf.raw)[5]
    q.put((ok, got))


def test_slice_hint_is_applied_or_reported_unavailable():
    q = multiprocessing.get_context("spawn").Queue()
    p = multiprocessing.get_context("spawn").Process(target=_child, args=(q,))
    p.start()
    ok, got = q.get(timeout=30)
    p.join(timeout=10)
    if not ok:
        pytest.skip("this kernel does not take a scheduler slice hint")
    assert got == 200_000


def test_nonsense_slice_is_refused_without_error():
    assert latency.set_slice(0) is False
    assert latency.set_slice(-5) is False
