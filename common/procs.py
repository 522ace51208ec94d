"""Running a child process with a deadline, and stopping it and everything it started,
for the code that runs in the image (smoke, proof, ppo_bench, rlhf_bench).

`run_bounded` is the one way these run a command: in a session of its own, with a
deadline, output captured, streamed line by line, or sent to a file. At the deadline (or
on an error or Ctrl-C while waiting) `stop_tree` stops the command and every process
below it.

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
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NoReturn, TextIO

from common import deadlines

PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # the folder that holds smoke/, ppo_bench/, rlhf_bench/


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


def _stop(root: int, tree: list[int], grace: float) -> list[int]:
    """SIGTERM `tree`, SIGKILL it and what `root` started meanwhile once all are gone or `grace` seconds passed."""
    _signal_all(tree, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(pid) for pid in tree):
        time.sleep(0.1)  # a poll, not a wait: the grace is the wait
    tree += [pid for pid in descendants(root) if pid not in tree]  # started meanwhile
    _signal_all(tree, signal.SIGKILL)
    return tree


def stop_tree(proc: subprocess.Popen, grace: float | None = None) -> None:
    """SIGTERM `proc` and every process below it, SIGKILL what is left after `grace` seconds
    (None: "stop_grace" in deadlines.DEADLINES); reap `proc`."""
    grace = deadlines.wait_for("stop_grace") if grace is None else grace
    _stop(proc.pid, [proc.pid, *descendants(proc.pid)], grace)
    proc.wait()


def stop_descendants(grace: float | None = None) -> list[int]:
    """SIGTERM every process below this one, SIGKILL what is left after `grace` seconds
    (None: "quick_stop" in deadlines.DEADLINES); the pids it found (none: it returns at once)."""
    grace = deadlines.wait_for("quick_stop") if grace is None else grace
    tree = descendants(os.getpid())
    return _stop(os.getpid(), tree, grace) if tree else []


def exit_now(code: int) -> NoReturn:
    """End this process with `code` at once, after stopping every process below it (stop_descendants).

    For a command's entry point, after its last word: nothing of its own can keep it alive past
    that, not a DataLoader worker blocked on a lock, a non-daemon thread, nor an atexit hook
    (multiprocessing's joins its children) waiting on either. Output is flushed first; main()
    stays an ordinary function that returns its code, for tests that call it in-process.
    """
    try:
        stop_descendants()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # closed, or a reader that went away
                pass
        os._exit(code)


@dataclass(frozen=True)
class Finished:
    """How a bounded run ended."""

    returncode: int | None  # None: stopped at the deadline
    stdout: str = ""  # captured output; empty when it was streamed, sent to a file or inherited
    stderr: str = ""


def run_bounded(
    cmd: list[str],
    timeout: float,
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    output: str | Callable[[str], None] | IO | None = "capture",
    grace: float | None = None,
) -> Finished:
    """Run `cmd` in a session of its own and wait at most `timeout` seconds.

    `output`: "capture" (stdout and stderr apart, in the Finished), a function (called with
    each line of stdout and stderr together, as it comes), an open file (stdout and stderr
    go there), or None (inherited). At the deadline the command and every process it
    started get SIGTERM, SIGKILL after `grace` seconds (None: "stop_grace" in deadlines.DEADLINES),
    and returncode is None; an error or Ctrl-C while waiting stops them too ("quick_stop"),
    before it propagates.
    """
    grace = deadlines.wait_for("stop_grace") if grace is None else grace
    if output == "capture":
        streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    elif callable(output):
        streams = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    elif output is None:
        streams = {}
    else:
        streams = {"stdout": output, "stderr": subprocess.STDOUT}
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, text=True, errors="replace", start_new_session=True, **streams)
    stopped = threading.Event()

    def stop() -> None:
        stopped.set()
        stop_tree(proc, grace)

    timer = threading.Timer(timeout, stop)
    timer.start()
    out = err = ""
    try:
        if output == "capture":
            out, err = proc.communicate()
        elif callable(output):
            assert proc.stdout is not None
            for line in proc.stdout:
                output(line.rstrip("\n"))
            proc.wait()
        else:
            proc.wait()
    finally:
        timer.cancel()
        timer.join()  # a stop at the deadline finishes before this returns
        if proc.poll() is None:  # an error or Ctrl-C here: leave nothing running
            stop_tree(proc, grace=deadlines.wait_for("quick_stop"))
    return Finished(None if stopped.is_set() else proc.returncode, out, err)


def run_streamed(cmd: list[str], timeout: float, out: TextIO, prefix: str = "  | ") -> int | None:
    """Run a Python command of this project (`package_env`), copying its output line by line to
    `out` behind `prefix`; its exit status, None when stopped at the deadline (run_bounded)."""

    def copy(line: str) -> None:
        print(prefix + line, file=out, flush=True)

    return run_bounded(cmd, timeout, env=package_env(), output=copy).returncode


def package_env() -> dict[str, str]:
    """This environment, with this project's packages importable by a child Python (torchrun workers, ppo_bench)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
    return env


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now, for a launcher's rendezvous (it may be taken meanwhile)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
