"""Stopping a process and everything it started, for the code that runs in the image.

A launcher (torchrun, `accelerate launch`, rlhf_bench's rank runner) may put its
workers in a session of its own, out of reach of a signal to the launcher's
process group. So the tree is read from /proc (parent links) *before* anything is
signalled (a killed parent's children are re-parented and the link is lost), and
every process of it gets the signal: SIGTERM first, SIGKILL after a grace period.
On a bare host or a cluster node (Slurm, Apptainer, `kubectl exec`) no container
teardown cleans up after a timed-out run; this does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


def parents() -> dict[int, int]:
    """{pid: parent pid} of every process visible in /proc."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses; split after the last ')'
        out[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, grandchildren, ...), parents before children."""
    children: dict[int, list[int]] = {}
    for child, parent in parents().items():
        children.setdefault(parent, []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            found.append(child)
            todo.append(child)
    return found


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def stop_tree(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM `proc` and every process below it, SIGKILL what is left after `grace` seconds; reap `proc`."""
    tree = [proc.pid, *descendants(proc.pid)]
    _signal_all(tree, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(pid) for pid in tree):
        time.sleep(0.1)
    tree += [pid for pid in descendants(proc.pid) if pid not in tree]  # started meanwhile
    _signal_all(tree, signal.SIGKILL)
    proc.wait()
