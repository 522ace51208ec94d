"""What this machine is, in the words the proof and the benchmarks print: its CPU and the cores
this process may use. Standard library only."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def host_cpu() -> str:
    """'AMD EPYC 7B13, 2 cores' (the cores this process may use)."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{model}, {cores} core{'s' if cores != 1 else ''}"
