"""A signer whose clock is wrong: the signer process started under libfaketime (Debian's faketime), so the
time it stamps into statements is `offset` off the real one. What a signing host with a wrong clock, or a
proof signed long ago, looks like to verify; the caller still cannot choose the time."""

from __future__ import annotations

import contextlib
import glob
import os

import pytest


def libfaketime() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not found:
        pytest.fail("libfaketime is not installed on this host (scripts/prepare-host.sh --test-tools installs faketime)")
    return found[0]


def clock_env(offset: str) -> dict[str, str]:
    """The variables that start a process under a clock `offset` off ("-100d", "+3650d", libfaketime's form)."""
    return {"LD_PRELOAD": libfaketime(), "FAKETIME": offset, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


@contextlib.contextmanager
def signer_clock(offset: str):
    """Every signer process started inside the block (attest.sign starts one per request) runs `offset` off."""
    saved = {name: os.environ.get(name) for name in ("LD_PRELOAD", "FAKETIME", "FAKETIME_DONT_FAKE_MONOTONIC")}
    os.environ.update(clock_env(offset))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
