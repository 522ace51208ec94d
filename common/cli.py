"""What the image's commands share: exit codes, an argument parser whose errors are one
line, and output files written whole (smoke, proof, ppo_bench, rlhf_bench).

Each command adds its own codes after these (proof: 3 no usable GPU; ppo_bench: 3 target
not reached, 4 a collective timed out; rlhf_bench: 3 no reward rise, 4 policy or ranks).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, NoReturn

EXIT_OK = 0
EXIT_FAILED = 1  # a check or a gate failed, or something unexpected went wrong
EXIT_USAGE = 2  # bad arguments


class CommandError(Exception):
    """The base of every command's typed errors: main() prints one as one line and exits with its
    `exit_code` (the host's pipeline.errors, each bench's errors)."""

    exit_code = EXIT_FAILED


class UsageError(CommandError):
    """Bad command-line input; main() prints it as one line and exits EXIT_USAGE. The host's
    pipeline.errors.UsageError is this error, typed as a pipeline error too. `command` is the
    (sub)command whose arguments were wrong, where the parser knows it ("build.py list")."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, command: str = "") -> None:
        super().__init__(message)
        self.command = command


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument raises UsageError, for main() to print as one line
    (argparse would print the usage block too, and exit by itself)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.prog)


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write `path` whole or not at all: `write(f)` fills a temporary file in the same folder,
    which then replaces `path` (os.replace); on any failure the temporary file is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "xb") as f:  # "x": a new file, with the permissions a plain open() gives
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: dict, sort_keys: bool = False) -> None:
    """`obj` as indented JSON, written whole (atomic_write)."""
    atomic_write(path, lambda f: f.write((json.dumps(obj, indent=2, sort_keys=sort_keys) + "\n").encode()))
