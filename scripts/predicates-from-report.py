#!/usr/bin/env python3
"""Write the test-result predicate of a multi-arch index, for `cosign attest`, from its children's folders.

    python scripts/predicates-from-report.py index OUT --ref REF --digest DIGEST CHILD_OUT...

Each CHILD_OUT is what `build.py sign IMAGE@DIGEST --report R [--proof P] --prepare CHILD_OUT` wrote
for one architecture's image (its six predicates, checked as signing checks them, and subject.json and
validation.json). The index's test result is the worst of their results, each test named by its
architecture ("arm64/smoke/gpu"), as pipeline.image_statements.index_statements makes it; OUT gets
test-result.json and predicates.tsv (its predicate type URI, a tab, the file name), attached with
`cosign attest --type URI --predicate OUT/FILE IMAGE@DIGEST`. Exit 1 with one line when a child folder
is missing a file or the children are not of one line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline import statements  # noqa: E402
from pipeline.errors import PipelineError  # noqa: E402
from pipeline.records import load  # noqa: E402
from pipeline.signing import PREDICATES_INDEX, write_predicates  # noqa: E402
from pipeline.statements import Subject  # noqa: E402


class Refused(Exception):
    """What is wrong with the input, in one line."""


def index_predicates(out: Path, ref: str, digest: str, children: list[Path]) -> None:
    about = []
    for child in children:
        subject = load(child / "subject.json", "child's subject")
        if subject["name"] != ref:
            raise Refused(f"{child}: a child of {subject['name']}, not of {ref}")
        about.append({**subject, "validation": load(child / "validation.json", "child's validation record")})
    variants = {c["variant"] for c in about}
    if len(about) < 2 or len(variants) != 1:
        raise Refused(f"an index needs two or more children of one line; got {len(about)} of {', '.join(sorted(variants))}")
    test = statements.statement(
        "test-result", Subject(ref, digest), statements.index_test_result(ref, about, about[0].get("flavor"))
    )
    write_predicates(out, [test], {"subject": {"name": ref, "digest": digest, "children": [c["digest"] for c in about]}})


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="predicates-from-report.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command_name", required=True)
    index = sub.add_parser("index", help="a multi-arch index's test result, from its children's folders")
    index.add_argument("out", type=Path)
    index.add_argument("--ref", required=True, help="the repository, e.g. ghcr.io/OWNER/proven-torch")
    index.add_argument("--digest", required=True, help="the index's digest")
    index.add_argument("children", type=Path, nargs="+")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        index_predicates(args.out, args.ref, args.digest, args.children)
    except (Refused, PipelineError) as err:
        print(f"predicates-from-report: {err}", file=sys.stderr)
        return 1
    print(f"==> {args.out}/{PREDICATES_INDEX}:")
    print((args.out / PREDICATES_INDEX).read_text(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
