"""The commands whose work spans stages, so no stage module owns them: `render` (the Dockerfiles and
specs, with each line's advisories from the audit, and the docs' example output from real logs) and
`lock` (resolve, then render again)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pipeline import examples
from pipeline.errors import UsageError
from pipeline.lock import compile_lock, override_news, pypi_requires, write_lock
from pipeline.render import rendered_files, stale_files
from pipeline.validation import audit
from pipeline.variants import BASE, REPO_ROOT, Matrix, resolve


def render_or_check(matrix: Matrix, check: bool) -> list[str]:
    """`build.py render`: write every Dockerfile and spec and the docs' example blocks, or with `check`
    write nothing and raise UsageError naming the committed files that are stale; the lines to print."""
    disclosures = audit.disclosures(matrix.every_variant())
    docs = {REPO_ROOT / path: text for path, text in examples.rendered_docs().items()}
    changed = [path for path, text in docs.items() if path.read_text() != text]
    if not check:
        files = rendered_files(matrix, disclosures) + [(path, docs[path]) for path in changed]
        for path, text in files:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return wrote(path for path, _ in files)
    stale = stale_files(matrix, disclosures) + changed
    if stale:
        names = ", ".join(p.name for p in stale)
        raise UsageError(
            f"{names} out of date with images/ and docs/examples/; run `python build.py render` and commit the result"
        )
    return [f"Dockerfiles, specs and the docs' examples up to date ({len(matrix.variants)} variants)"]


def wrote(paths: Iterable[Path]) -> list[str]:
    """'wrote images/...': one line per file written, named from the repository's root."""
    return [f"wrote {path.relative_to(REPO_ROOT)}" for path in paths]


def relock(matrix: Matrix, cuda: str | None, torch: str | None, flavor: str | None) -> int:
    """`build.py lock --cuda ...`: resolve the line once per platform and write its lock, then render again (the
    Dockerfiles and specs follow the lock); prints each step and each file written as it goes."""
    variant = resolve(matrix, cuda, torch, BASE if flavor is None else flavor)
    for platform in variant.platforms:
        print(f"==> resolving {variant.name} for {platform} with uv against {variant.index}", flush=True)
        for line in wrote(write_lock(matrix, variant, compile_lock(matrix, variant, platform), platform=platform)):
            print(line)
    for line in render_or_check(matrix, check=False):
        print(line)
    for override in variant.overrides:
        if override.package:
            print(override_news(override, pypi_requires(override.package)), flush=True)
    return 0
