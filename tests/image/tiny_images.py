"""Tiny images (FROM scratch, one file) for tests of registry logic: BuildKit makes them for
any platform in about a second, without emulation."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pipeline.docker_env import find_build_cli
from pipeline.variants import arch
from tests.image.conftest import TEST_LABELS


def build_tiny(folder: Path, platform: str, content: str = "", labels: dict[str, str] | None = None) -> str:
    """Build one tiny image for `platform` in `folder` (made here); its image ID."""
    context = folder / f"{arch(platform)}-{abs(hash((content, tuple(sorted((labels or {}).items()))))):x}"
    context.mkdir(parents=True, exist_ok=True)
    (context / "which").write_text(f"{platform}\n{content}\n")
    label_text = " ".join(f'{k}="{v}"' for k, v in {**TEST_LABELS, **(labels or {})}.items())
    (context / "Dockerfile").write_text(f"FROM scratch\nCOPY which /\nLABEL {label_text}\n")
    cli = find_build_cli()
    iid = context / "iid"
    subprocess.run(
        [*cli.argv, "-q", "--platform", platform, "--iidfile", str(iid), str(context)],
        env=cli.environ(),
        check=True,
        capture_output=True,
        timeout=300,
    )
    return iid.read_text().strip()
