"""This host as the scope of a measured local run: CPU model, cores, memory."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path


def host_facts() -> dict:
    cpu = platform.processor() or platform.machine()
    mem = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {"hostname": socket.gethostname(), "cpu_model": cpu, "cpu_cores": os.cpu_count(),
            "usable_cores": usable, "memory_bytes": mem,
            "memory_gib": None if mem is None else round(mem / 2**30, 1),
            "platform": platform.platform(), "python": platform.python_version()}


def describe_host(host: dict) -> str:
    return (f"this host: {host['cpu_model']}, {host['usable_cores']} cores, "
            f"{host['memory_gib']} GiB")
