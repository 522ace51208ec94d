"""The signer's venv (.venv-signer), the only environment that reads the signing key, installs exactly
what requirements-signer.lock pins, each file by hash, and the lock is the one its inputs make: the
packages requirements-signer.txt names, at requirements-dev.txt's versions (no pin written twice)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess

import pytest

from pipeline.attest import REPO_ROOT, _signer_python

pytestmark = pytest.mark.unit

LOCK = REPO_ROOT / "requirements-signer.lock"
NAMES = REPO_ROOT / "requirements-signer.txt"
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^ ;\\]+)")


def signer_pins() -> str:
    """What scripts/lock-signer.sh resolves: each name's line of requirements-dev.txt."""
    names = [line.strip() for line in NAMES.read_text().splitlines() if line.strip() and not line.startswith("#")]
    dev = (REPO_ROOT / "requirements-dev.txt").read_text().splitlines()
    return "".join(next(line for line in dev if line.startswith(f"{name}==")) + "\n" for name in names)


def pinned() -> dict[str, str]:
    return {m[1].lower(): m[2] for line in LOCK.read_text().splitlines() if (m := PIN.match(line))}


def test_the_lock_was_made_from_the_inputs_as_they_are_now():
    first = LOCK.read_text().splitlines()[0]
    assert first.startswith(f"# inputs sha256: {hashlib.sha256(signer_pins().encode()).hexdigest()}"), (
        "the signer's names or their pins changed after the lock was made: run `bash scripts/lock-signer.sh` and commit"
    )


def test_every_package_of_the_lock_is_pinned_with_hashes():
    blocks = re.split(r"\n(?=[A-Za-z0-9])", LOCK.read_text().split("\n", 1)[1])
    packages = [b for b in blocks if PIN.match(b)]
    assert {"securesystemslib", "cryptography"} <= set(pinned())
    for block in packages:
        assert re.search(r"--hash=sha256:[0-9a-f]{64}", block), block.splitlines()[0]


def test_every_input_is_in_the_lock_at_its_version():
    wanted = {m[1].lower(): m[2] for line in signer_pins().splitlines() if (m := PIN.match(line))}
    assert wanted and all(pinned().get(name) == version for name, version in wanted.items())


def test_the_signers_venv_holds_exactly_the_lock():
    """What is installed: the lock's pins, and the pip and setuptools CPython's ensurepip seeds a venv with."""
    done = subprocess.run(
        [
            _signer_python(),
            "-s",
            "-E",
            "-c",
            "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name'].lower(): d.version for d in m.distributions()}))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    installed = json.loads(done.stdout)
    seeded = {name: installed.pop(name) for name in ("pip", "setuptools") if name in installed}
    assert installed == pinned(), (installed, seeded)
