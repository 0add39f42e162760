"""Best-effort latency hint for the serving process (Linux EEVDF scheduler, kernel ≥ 6.12).

A shorter scheduler slice (sched_attr.sched_runtime for SCHED_OTHER) lets a task that
sleeps most of the time preempt sooner when it wakes for a deadline. It does not raise
priority or CPU share and needs no privilege. Anywhere else it is a no-op.
"""

from __future__ import annotations

import ctypes
import struct
import sys

_SYS_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}
_FMT = "IIQiIQQQII"  # struct sched_attr, SCHED_ATTR_SIZE_VER1 = 56 bytes


def set_slice(ns: int) -> bool:
    """Ask for a scheduler slice of `ns` nanoseconds; True when the kernel accepted it."""
    if not sys.platform.startswith("linux") or ns <= 0:
        return False
    import platform
    nr = _SYS_SCHED_SETATTR.get(platform.machine())
    if nr is None:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        attr = ctypes.create_string_buffer(struct.pack(_FMT, 56, 0, 0, 0, 0, ns, 0, 0, 0, 0))
        return libc.syscall(nr, 0, attr, 0) == 0
    except (OSError, AttributeError):
        return False
