"""The code stays as the linters want it: ruff (lint and format, ruff.toml) and ShellCheck, in CI through `make test` too."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.variants import REPO_ROOT

pytestmark = pytest.mark.unit

BIN = Path(sys.executable).parent
SHELL_FILES = [
    "container/start.sh",
    "container/profile.sh",
    "container/proof",
    "container/desktop/start-desktop.sh",
    *sorted(p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "scripts").glob("*.sh")),
    ".ci/run",
]


def tool(name: str) -> str:
    found = shutil.which(name) or str(BIN / name)
    if not Path(found).exists():
        pytest.fail(f"{name} not installed: `pip install -r requirements-dev.txt` brings it")
    return found


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)


def test_ruff_check_is_clean():
    done = run(tool("ruff"), "check", "--output-format", "concise", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_format_leaves_nothing_to_change():
    done = run(tool("ruff"), "format", "--check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_shellcheck_is_clean():
    done = run(tool("shellcheck"), *SHELL_FILES)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_github_workflows_follow_the_workflow_schema():
    done = run(
        tool("check-jsonschema"),
        "--builtin-schema",
        "vendor.github-workflows",
        *sorted(str(p) for p in (REPO_ROOT / ".github" / "workflows").glob("*.yml")),
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_is_clean():
    """Every workflow passes actionlint (.github/actionlint.yaml names the self-hosted runners' labels)."""
    done = run(tool("actionlint"), "-no-color")
    assert done.returncode == 0, done.stdout + done.stderr


def test_zizmor_is_clean():
    """zizmor's security audits (pinned actions, no template injection, least permissions, no persisted credentials)."""
    done = run(tool("zizmor"), "--offline", "--no-progress", ".github/workflows")
    assert done.returncode == 0, done.stdout + done.stderr
