#!/usr/bin/env python3
"""Write the predicates of a pushed image's statements as files, one per kind, for `cosign attest`.

    python scripts/predicates-from-report.py image REPORT OUT [--digest DIGEST] [--proof PROOF_JSON]
    python scripts/predicates-from-report.py index OUT --ref REF --digest DIGEST CHILD_OUT...

`image` reads a build's report folder (report.json, validation.json, facts.json, the SBOM) and writes the
six predicates `build.py --sign-key` and `build.py sign` sign, made by the same function
(pipeline.publish.image_statements): OUT/provenance.json, sbom.json, test-result.json, benchmark.json,
vulns.json, vex.json. With --proof, a later proof of the same image (proof.json of `proof --require-gpu
--out DIR` on a GPU host) is what the test result and benchmark say, as `build.py sign --proof` signs it.

`index` writes the test result of a multi-arch index from its children's OUT folders: the worst of their
results, each test named by its architecture ("arm64/smoke/gpu"), as pipeline.publish.index_statements
makes it.

Every OUT gets predicates.tsv: one line per predicate file, its predicate type URI (pipeline.statements
.PREDICATES), a tab, the file name; the workflow attaches each with
`cosign attest --type URI --predicate OUT/FILE IMAGE@DIGEST`. OUT also keeps subject.json (the image, its
digest, line and platform) and validation.json (the record the test result was made from).
Exit 1 with one line when the report is not a pushed build's, a proof did not pass, or a file is missing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline import publish, statements  # noqa: E402
from pipeline.errors import PipelineError  # noqa: E402
from pipeline.statements import PREDICATES, Subject  # noqa: E402

INDEX = "predicates.tsv"


class Refused(Exception):
    """What is wrong with the input, in one line."""


def read_json(path: Path, what: str) -> dict:
    try:
        return json.loads(path.read_text())
    except OSError as err:
        raise Refused(f"{path}: cannot read the {what} ({err.strerror})") from None
    except ValueError:
        raise Refused(f"{path}: the {what} is not JSON") from None


def write(out: Path, kinds: dict[str, dict], extra: dict[str, dict]) -> None:
    """OUT/<kind>.json per predicate, predicates.tsv naming each with its type, and the extra records."""
    out.mkdir(parents=True, exist_ok=True)
    for name, record in {**kinds, **extra}.items():
        (out / f"{name}.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    (out / INDEX).write_text("".join(f"{PREDICATES[kind]}\t{kind}.json\n" for kind in sorted(kinds)))


def pushed_digest(report: dict, wanted: str | None, path: Path) -> tuple[str, str]:
    """(repository, digest) of the pushed image: the one digest the report names, or --digest."""
    if report.get("status") != "pushed":
        raise Refused(f"{path}: status {report.get('status')!r}, not 'pushed': only a pushed image has a digest to attest")
    refs = report.get("pushed") or {}
    digests = {digest: ref.rpartition(":")[0] for ref, digest in refs.items()}
    if wanted:
        if wanted not in digests:
            raise Refused(f"{path}: {wanted} is not one of the pushed digests ({', '.join(digests) or 'none'})")
        return digests[wanted], wanted
    if len(digests) != 1:
        raise Refused(f"{path}: {len(digests)} pushed digests ({', '.join(digests) or 'none'}); choose one with --digest")
    ((digest, repository),) = digests.items()
    return repository, digest


def image_predicates(report_path: Path, out: Path, digest: str | None = None, proof_path: Path | None = None) -> None:
    report = read_json(report_path, "build report")
    repository, digest = pushed_digest(report, digest, report_path)
    run_dir = report_path.parent
    proof = read_json(proof_path, "proof record") if proof_path else None
    if proof is not None and proof.get("ok") is not True:
        raise Refused(f"{proof_path}: the proof did not pass ({proof.get('verdict') or 'no verdict'}): no predicates of it")
    # cosign makes its own statements around these predicates; the subject here only feeds them.
    made = publish.image_statements(run_dir, Subject(repository, digest, run="cosign"), proof)
    facts = read_json(run_dir / publish.FACTS, "run facts")
    validation = read_json(run_dir / "validation.json", "validation record")
    subject = {
        "name": repository,
        "digest": digest,
        "variant": report["variant"],
        "platform": facts["platform"],
        "flavor": facts.get("flavor"),
    }
    write(
        out,
        {str(statements.kind_of(s["predicateType"])): s["predicate"] for s in made},
        {"subject": subject, "validation": statements.validation_with_proof(validation, proof) if proof else validation},
    )


def index_predicates(out: Path, ref: str, digest: str, children: list[Path]) -> None:
    about = []
    for child in children:
        subject = read_json(child / "subject.json", "child's subject")
        if subject["name"] != ref:
            raise Refused(f"{child}: a child of {subject['name']}, not of {ref}")
        about.append({**subject, "validation": read_json(child / "validation.json", "child's validation record")})
    variants = {c["variant"] for c in about}
    if len(about) < 2 or len(variants) != 1:
        raise Refused(f"an index needs two or more children of one line; got {len(about)} of {', '.join(sorted(variants))}")
    test = statements.index_test_result(ref, about, about[0].get("flavor"))
    write(out, {"test-result": test}, {"subject": {"name": ref, "digest": digest, "children": [c["digest"] for c in about]}})


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="predicates-from-report.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command_name", required=True)
    image = sub.add_parser("image", help="the six predicates of a pushed image, from its build's report folder")
    image.add_argument("report", type=Path)
    image.add_argument("out", type=Path)
    image.add_argument("--digest", help="the pushed digest to write them for, when the report names several")
    image.add_argument("--proof", type=Path, help="proof.json of a later proof of that digest, in place of the build's")
    index = sub.add_parser("index", help="a multi-arch index's test result, from its children's folders")
    index.add_argument("out", type=Path)
    index.add_argument("--ref", required=True, help="the repository, e.g. ghcr.io/OWNER/proven-torch")
    index.add_argument("--digest", required=True, help="the index's digest")
    index.add_argument("children", type=Path, nargs="+")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        if args.command_name == "image":
            image_predicates(args.report, args.out, args.digest, args.proof)
        else:
            index_predicates(args.out, args.ref, args.digest, args.children)
    except (Refused, PipelineError) as err:
        print(f"predicates-from-report: {err}", file=sys.stderr)
        return 1
    print(f"==> {args.out}/{INDEX}:")
    print((args.out / INDEX).read_text(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
