#!/usr/bin/env python3
"""Write the predicates of a pushed image's statements as files, one per kind, for `cosign attest`.

    python scripts/predicates-from-report.py image REPORT OUT [--digest DIGEST] -- BUILD_COMMAND...
    python scripts/predicates-from-report.py proof OUT PROOF_JSON
    python scripts/predicates-from-report.py index OUT --ref REF --digest DIGEST CHILD_OUT...

`image` reads a build's report.json (and the validation.json and SBOM beside it) and writes the six
predicates build.py signs itself with --sign-key, made by the same code (pipeline.attest.image_statements):
OUT/provenance.json, sbom.json, test-result.json, benchmark.json, vulns.json, vex.json. BUILD_COMMAND
is the build.py command line that made the image, for the provenance. It needs the host's Docker (the
tools and the base image the provenance names) and the host's .venv.

`proof` puts a later proof of the same image in place of the build's own (`proof --require-gpu --out DIR`
on a GPU host: DIR/proof.json): test-result.json and benchmark.json are written again from it. Standard
library only, so a GPU runner without the .venv runs it.

`index` writes the test result of a multi-arch index from its children's OUT folders: the worst of their
results, each test named by its architecture ("arm64/smoke/gpu"), as pipeline.attest.attest_index signs it.

Every OUT gets predicates.tsv: one line per predicate file, its predicate type URI (pipeline.statements
.PREDICATES), a tab, the file name; the workflow attaches each with
`cosign attest --type URI --predicate OUT/FILE IMAGE@DIGEST`. OUT also keeps subject.json (the image, its
digest, line and platform) and validation.json (the record the test result was made from).
Exit 1 with one line when the report is not a pushed build's or a file is missing.
"""

from __future__ import annotations

import argparse
import json
import platform as host
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline import statements  # noqa: E402
from pipeline.errors import PipelineError  # noqa: E402
from pipeline.statements import PREDICATES  # noqa: E402
from pipeline.variants import AMD64, Variant, load_matrix  # noqa: E402

INDEX = "predicates.tsv"
# The parts of a proof record that Validation.as_dict lifts to the top of the validation record
# (pipeline/validation/gate.py); the rest of the record goes under "proof". tests/unit/test_deploy.py holds
# with_proof to Validation.as_dict.
LIFTED = ("smoke", "ppo", "ppo_cpu")


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
    listed = {}
    if (out / INDEX).exists():
        listed = dict(line.split("\t")[::-1] for line in (out / INDEX).read_text().splitlines() if line)
    listed |= {f"{kind}.json": PREDICATES[kind] for kind in kinds}
    (out / INDEX).write_text("".join(f"{uri}\t{name}\n" for name, uri in sorted(listed.items())))


def variant_named(name: str) -> Variant:
    matrix = load_matrix()
    for variant in [*matrix.variants, *matrix.flavored_variants()]:
        if variant.name == name:
            return variant
    raise Refused(f"the report names line {name!r}, which images/variants.toml does not have")


# --------------------------------------------------------------------------- image


def pushed_digest(report: dict, wanted: str | None, path: Path) -> tuple[str, str]:
    """(repository, digest) of the pushed image: the one digest the report names, or --digest."""
    if report.get("status") != "pushed":
        raise Refused(f"{path}: status {report.get('status')!r}, not 'pushed': only a pushed image has a digest to attest")
    refs = (report.get("push") or {}).get("refs") or {}
    digests = {digest: ref.rpartition(":")[0] for ref, digest in refs.items()}
    if wanted:
        if wanted not in digests:
            raise Refused(f"{path}: {wanted} is not one of the pushed digests ({', '.join(digests) or 'none'})")
        return digests[wanted], wanted
    if len(digests) != 1:
        raise Refused(f"{path}: {len(digests)} pushed digests ({', '.join(digests) or 'none'}); choose one with --digest")
    ((digest, repository),) = digests.items()
    return repository, digest


def image_predicates(report_path: Path, out: Path, command: list[str], digest: str | None = None) -> None:
    # pipeline.attest needs the .venv (requests, securesystemslib): imported here, so `proof` and
    # `index` run on a bare Python.
    from pipeline import attest, docker_env

    report = read_json(report_path, "build report")
    repository, digest = pushed_digest(report, digest, report_path)
    run_dir = report_path.parent
    validation = read_json(run_dir / "validation.json", "validation record")  # the stamped record, as pushed
    variant = variant_named(report["variant"])
    platform = validation.get("platform", AMD64)
    sbom = run_dir / (validation.get("sbom") or {}).get("file", "sbom.cdx.json")
    if not sbom.is_file():
        raise Refused(f"{sbom}: the build's SBOM is not there")
    client = docker_env.docker_client()
    facts = attest.run_facts(
        client, docker_env.find_build_cli().description, command, report["revision"], report["created"], run_dir.name
    )
    # cosign signs these, not build.py: image_statements reads the run's facts only, never the key.
    signer = attest.Signer(key=None, facts=facts, base_images={platform: load_matrix().base_image_for(platform)})
    deps = attest.dependencies(client, variant, platform, signer.base_images[platform], facts.commit)
    made = attest.image_statements(
        signer, statements.Subject(repository, digest), validation, report["stamped_image_id"], deps, variant, platform, sbom
    )
    subject = {"name": repository, "digest": digest, "variant": variant.name, "platform": platform}
    write(
        out,
        {statements.kind_of(s["predicateType"]): s["predicate"] for s in made},
        {"subject": subject, "validation": validation},
    )


# --------------------------------------------------------------------------- a later proof


def with_proof(validation: dict, proof: dict) -> dict:
    """The build's validation record with a later proof's outcome in place of its own: the shape
    Validation(proof=...).as_dict() gives, the build's other stages (hygiene, audit, size) kept."""
    where = proof.get("where") or {}
    emulated = bool(where.get("emulation"))
    platform = validation.get("platform", AMD64)
    gpu = bool(proof.get("gpu"))
    if emulated:
        validated_on = f"{platform}: validated under emulation on amd64; not run on Arm hardware or on a GPU"
    else:
        validated_on = f"{platform}: " + ("validated on a GPU" if gpu else "validated on the CPU only; not run on a GPU")
    return {
        **validation,
        "ok": proof.get("ok") is True,
        "gpu": gpu,
        "emulated": emulated,
        "validated_on": validated_on,
        "failures": list(proof.get("failures") or []),
        "verdict": proof.get("verdict"),
        "smoke": proof.get("smoke") or {},
        "ppo": proof.get("ppo") or {},
        "ppo_cpu": proof.get("ppo_cpu"),
        "gpu_cpu_sps_ratio": proof.get("gpu_cpu_sps_ratio"),
        "proof": {k: v for k, v in proof.items() if k not in LIFTED},
    }


def proof_predicates(out: Path, proof_path: Path) -> None:
    subject = read_json(out / "subject.json", "subject (write it with `image` first)")
    before = read_json(out / "test-result.json", "build's test result")
    validation = with_proof(read_json(out / "validation.json", "validation record"), read_json(proof_path, "proof record"))
    flavor = variant_named(subject["variant"]).flavor
    test = statements.test_result_predicate(validation, before["imageId"], before["configuration"], flavor)
    bench = statements.benchmark_predicate(validation, {"machine": host.machine(), "system": host.platform()})
    write(out, {"test-result": test, "benchmark": bench}, {"validation": validation})


# --------------------------------------------------------------------------- index


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
    flavor = variant_named(variants.pop()).flavor
    test = statements.index_test_result(ref, about, flavor)
    write(out, {"test-result": test}, {"subject": {"name": ref, "digest": digest, "children": [c["digest"] for c in about]}})


# --------------------------------------------------------------------------- command line


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="predicates-from-report.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command_name", required=True)
    image = sub.add_parser("image", help="the six predicates of a pushed image, from its build's report.json")
    image.add_argument("report", type=Path)
    image.add_argument("out", type=Path)
    image.add_argument("--digest", help="the pushed digest to write them for, when the report names several")
    image.add_argument("build_command", nargs=argparse.REMAINDER, help="-- then the build.py command line that made the image")
    proof = sub.add_parser("proof", help="test result and benchmark again, from a later proof's proof.json")
    proof.add_argument("out", type=Path)
    proof.add_argument("proof", type=Path)
    index = sub.add_parser("index", help="a multi-arch index's test result, from its children's folders")
    index.add_argument("out", type=Path)
    index.add_argument("--ref", required=True, help="the repository, e.g. ghcr.io/OWNER/proven-torch")
    index.add_argument("--digest", required=True, help="the index's digest")
    index.add_argument("children", type=Path, nargs="+")
    args = parser.parse_args(argv)
    if args.command_name == "image":
        args.build_command = args.build_command[1:] if args.build_command[:1] == ["--"] else args.build_command
        if not args.build_command:
            parser.error("image: give the build.py command line after --, for the provenance")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        if args.command_name == "image":
            image_predicates(args.report, args.out, args.build_command, args.digest)
        elif args.command_name == "proof":
            proof_predicates(args.out, args.proof)
        else:
            index_predicates(args.out, args.ref, args.digest, args.children)
    except (Refused, PipelineError) as err:  # PipelineError: Docker not answering, named by docker_env
        print(f"predicates-from-report: {err}", file=sys.stderr)
        return 1
    print(f"==> {args.out}/{INDEX}:")
    print((args.out / INDEX).read_text(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
