"""The example output the README and the docs quote, taken from real runs' logs committed under
docs/examples/ (each folder says where and when it ran), never typed by hand. `build.py render`
rewrites each marked block from its log and `render --check` fails when a block and its log differ,
like the Dockerfiles. tests/unit/test_examples.py holds each committed log to the record beside it
(the lines are what smoke/proof.py prints from that proof.json). A number in the prose (a size, a time)
is a figure, `<!-- figure: FILE FIELD FORMAT -->VALUE<!-- /figure -->`: VALUE is FIELD of the committed
JSON record FILE, formatted, and render rewrites it as it does the blocks."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import UsageError
from pipeline.variants import REPO_ROOT

EXAMPLES_DIR = Path("docs") / "examples"


@dataclass(frozen=True)
class Example:
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


EXAMPLES = {  # by the block's name in its marker
    "proof-cpu": Example(EXAMPLES_DIR / "proof-cpu" / "proof.log", ("against the release", "proof: PROVEN", "proof: FAILED")),
    "bench-atari-cpu": Example(EXAMPLES_DIR / "bench-atari-cpu" / "bench.log", ("proof --bench atari:",)),
    "diff-lines": Example(  # the summary lines, not the list of each package
        EXAMPLES_DIR / "diff-lines" / "diff.log",
        ("diff ", "  trust", "  changed", "  packages", "  security", "  cost", "  proof", "  speed", "verdict", "  REGRESSION"),
    ),
}
_GUIDES = ("using-the-image", "diff", "benchmarks", "ppo-benchmark", "rlhf-flavor", "scale-out")
DOCS = (Path("README.md"), *(Path("docs") / f"{name}.md" for name in _GUIDES))
_BLOCK = re.compile(r"(<!-- example: (?P<name>[\w-]+)[^>]*-->\n```text\n)(?P<body>.*?)(```\n<!-- /example -->)", re.S)


# How a figure prints its field: sizes in decimal units, as docker and `build.py diff` print them
FORMATS = {
    "GB": lambda v: f"{v / 1e9:.2f} GB",
    "MB": lambda v: f"{v / 1e6:,.0f} MB",
    "s": lambda v: f"{v:,.0f} s",
    "s1": lambda v: f"{v:,.1f} s",
    "min": lambda v: f"{v / 60:.1f} min",
    "int": lambda v: f"{v:,.0f}",
    "f1": lambda v: f"{v:,.1f}",
    "len": lambda v: f"{len(v):,}",
}
# One line of prose at most: a figure never spans a paragraph, so a lost end marker cannot eat one
_FIGURE = re.compile(r"(<!-- figure: (?P<file>\S+) (?P<field>\S+) (?P<format>\S+) -->)[^<\n]*(<!-- /figure -->)")


def figure(file: str, field: str, form: str, root: Path = REPO_ROOT) -> str:
    """FIELD (dotted; a list's items by index) of the committed JSON record FILE, formatted by FORMATS[form]."""
    try:
        value = json.loads((root / file).read_text())
    except OSError as err:
        raise UsageError(f"{file}: cannot read the figure's record ({err.strerror})") from None
    except ValueError:
        raise UsageError(f"{file}: the figure's record is not JSON") from None
    for key in field.split("."):
        try:
            value = value[int(key)] if isinstance(value, list) else value[key]
        except (KeyError, IndexError, ValueError, TypeError):
            raise UsageError(f"{file}: no field {field!r} for a figure") from None
    if form not in FORMATS:
        raise UsageError(f"{file}: a figure of {field!r} asks for format {form!r}; known: {', '.join(FORMATS)}")
    try:
        return FORMATS[form](value)
    except (TypeError, ValueError):
        raise UsageError(f"{file}: field {field!r} is {value!r}, not a figure of format {form!r}") from None


def rendered(text: str, root: Path = REPO_ROOT) -> str:
    """`text` with every example block filled from its log and every figure from its record."""

    def fill(match: re.Match) -> str:
        example = EXAMPLES.get(match["name"])
        if example is None:
            raise UsageError(f"an example block names {match['name']!r}, which pipeline/examples.py does not know")
        return match.group(1) + "".join(f"{line}\n" for line in example.lines(root)) + match.group(4)

    def fill_figure(match: re.Match) -> str:
        return match.group(1) + figure(match["file"], match["field"], match["format"], root) + match.group(5)

    return _FIGURE.sub(fill_figure, _BLOCK.sub(fill, text))


def rendered_docs(root: Path = REPO_ROOT) -> dict[Path, str]:
    """Each document with example blocks and figures, as render writes it (relative path -> text)."""
    return {doc: rendered((root / doc).read_text(), root) for doc in DOCS}
