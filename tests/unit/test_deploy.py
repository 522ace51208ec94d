"""The Kubernetes manifests validate offline against a current Kubernetes release's schemas (strict)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.variants import REPO_ROOT

pytestmark = pytest.mark.unit

MANIFESTS = sorted((REPO_ROOT / "deploy" / "kubernetes").glob("*.yaml"))


def validate(*paths: Path) -> subprocess.CompletedProcess:
    tool = shutil.which("kubernetes-validate") or str(Path(sys.executable).parent / "kubernetes-validate")
    if not Path(tool).exists():
        pytest.fail("kubernetes-validate not installed: `pip install -r requirements-dev.txt` brings it")
    return subprocess.run([tool, "--strict", *map(str, paths)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_manifest_validates_strictly(path):
    done = validate(path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_unknown_field_fails_the_validation(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (REPO_ROOT / "deploy" / "kubernetes" / "workspace.yaml")
        .read_text()
        .replace("readOnlyRootFilesystem", "readOnlyRootFileSystem")
    )
    assert validate(bad).returncode != 0


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_every_container_runs_restricted(path):
    text = path.read_text()
    for needle in (
        "runAsNonRoot: true",
        "allowPrivilegeEscalation: false",
        "readOnlyRootFilesystem: true",
        'drop: ["ALL"]',
        "RuntimeDefault",
    ):
        assert needle in text, needle
