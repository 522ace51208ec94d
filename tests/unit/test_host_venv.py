"""The host's virtual environment runs ppo_bench's and the display hook's unit tests against the image's
own versions of the packages they use: the default line's lock is the source (scripts/host-venv.sh
installs from it)."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess

import pytest

from pipeline.variants import REPO_ROOT

pytestmark = pytest.mark.unit

SHARED = ("numpy", "matplotlib", "tensorboard", "tqdm", "gymnasium", "mujoco", "pygame-ce", "opencv-python-headless")


def locked_versions(line: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for path in sorted((REPO_ROOT / "images" / "locks" / line / "amd64").glob("*.txt")):
        pins.update(re.findall(r"^([A-Za-z0-9_.-]+)==([^ \\\n]+)", path.read_text(), flags=re.M))
    return pins


@pytest.mark.parametrize("package", SHARED)
def test_the_host_runs_the_images_version(package, matrix):
    default = next(v.name for v in matrix.variants if v.is_default)
    want = locked_versions(default)[package]
    have = importlib.metadata.version(package)
    assert have == want, f"host {package} {have}, the image's lock {want}: rerun scripts/host-venv.sh"


def test_make_venv_only_makes_the_venvs():
    """`make venv` runs scripts/host-venv.sh and nothing else: no host preparation, no build (make -n: printed, not run)."""
    outside_make = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}  # `make test` runs this
    argv = ["make", "-n", "--no-print-directory", "venv"]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=30, env=outside_make)
    assert (done.returncode, done.stdout.splitlines()) == (0, ["bash scripts/host-venv.sh"]), done.stderr


def test_the_readme_names_make_venv():
    assert "`make venv`" in (REPO_ROOT / "README.md").read_text()
