"""The one way the pipeline runs a program on the host, and the one place Ctrl-C becomes `Interrupted`.

Every host command (docker build, skopeo, `docker manifest`, uv, git) runs through
`run_host`: in a session of its own, with a deadline taken from `common.deadlines.DEADLINES`, and at
that deadline, on an error or on Ctrl-C, stopped together with every process it
started (common.procs.run_bounded: SIGTERM, SIGKILL after a grace period). Steps that
talk to the daemon through the SDK (containers, pushes) wrap themselves in `step()`.

A step names only itself ("interrupted during docker build"); what the run had
already tagged or pushed is added by the run (pipeline.line.interrupted) or the
matrix (pipeline.all_lines), the only places that know it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

from common.deadlines import DEADLINES
from common.procs import Finished, run_bounded
from common.rules import PASSPHRASE_ENV  # the signer's alone: taken out of every host command's environment
from pipeline.errors import Interrupted

GRACE_S = DEADLINES["stop_grace"]  # between SIGTERM and SIGKILL


@contextlib.contextmanager
def step(what: str) -> Iterator[None]:
    """Ctrl-C inside the block becomes Interrupted('interrupted during WHAT'), exit 130."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted during {what}") from None


def host_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a host command: `env` (default: this process's) without the signing passphrase,
    which only the signer process (pipeline/attest.py) gets."""
    return {k: v for k, v in (os.environ if env is None else env).items() if k != PASSPHRASE_ENV}


def run_host(
    argv: list[str],
    kind: str,
    *,
    what: str | None = None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    on_line: Callable[[str], None] | None = None,
) -> Finished:
    """Run a host command of `kind` (a key of DEADLINES) and wait at most its deadline.

    With `on_line`, stdout and stderr together are handed over line by line as they come;
    otherwise both are captured apart. Ctrl-C stops the command and its children, then
    raises Interrupted naming `what` (default: the kind)."""
    with step(what or kind):
        try:
            return run_bounded(argv, DEADLINES[kind], env=host_env(env), cwd=cwd, output=on_line or "capture", grace=GRACE_S)
        except OSError as err:  # not found, not executable: as a shell says it
            return Finished(127, "", f"cannot run {argv[0]}: {err.strerror or err}")
