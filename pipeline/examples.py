"""The example output the README and the docs quote, taken from real runs' logs committed under
docs/examples/ (each folder says where and when it ran), never typed by hand. `build.py render`
rewrites each marked block from its log and `render --check` fails when a block and its log differ,
like the Dockerfiles. tests/unit/test_examples.py holds each committed log to the record beside it
(the lines are what smoke/proof.py prints from that proof.json)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import UsageError
from pipeline.variants import REPO_ROOT

EXAMPLES_DIR = Path("docs") / "examples"


@dataclass(frozen=True)
class Example:
    name: str  # the block's name in its marker
    log: Path  # relative to the repository root
    starts: tuple[str, ...]  # the log's lines that start so, in the log's order

    def lines(self, root: Path = REPO_ROOT) -> list[str]:
        try:
            text = (root / self.log).read_text()
        except OSError as err:
            raise UsageError(f"{self.log}: cannot read the example's log ({err.strerror})") from None
        picked = [line.rstrip() for line in text.splitlines() if line.startswith(self.starts)]
        if not picked:
            raise UsageError(f"{self.log}: no line starts with {' or '.join(map(repr, self.starts))}; the example is empty")
        return picked


EXAMPLES = {
    "proof-cpu": Example(
        "proof-cpu", EXAMPLES_DIR / "proof-cpu" / "proof.log", ("against the release", "proof: PROVEN", "proof: FAILED")
    ),
    "bench-atari-cpu": Example("bench-atari-cpu", EXAMPLES_DIR / "bench-atari-cpu" / "bench.log", ("proof --bench atari:",)),
    "diff-lines": Example(  # the summary lines, not the list of each package
        "diff-lines",
        EXAMPLES_DIR / "diff-lines" / "diff.log",
        ("diff ", "  trust", "  changed", "  packages", "  security", "  cost", "  proof", "  speed", "verdict", "  REGRESSION"),
    ),
}
DOCS = (Path("README.md"), Path("docs") / "using-the-image.md", Path("docs") / "diff.md")
_BLOCK = re.compile(r"(<!-- example: (?P<name>[\w-]+)[^>]*-->\n```text\n)(?P<body>.*?)(```\n<!-- /example -->)", re.S)


def rendered(text: str, root: Path = REPO_ROOT) -> str:
    """`text` with every example block filled from its log."""

    def fill(match: re.Match) -> str:
        example = EXAMPLES.get(match["name"])
        if example is None:
            raise UsageError(f"an example block names {match['name']!r}, which pipeline/examples.py does not know")
        return match.group(1) + "".join(f"{line}\n" for line in example.lines(root)) + match.group(4)

    return _BLOCK.sub(fill, text)


def rendered_docs(root: Path = REPO_ROOT) -> dict[Path, str]:
    """Each document with example blocks, as render writes it (relative path -> text)."""
    return {doc: rendered((root / doc).read_text(), root) for doc in DOCS}
