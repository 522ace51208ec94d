#!/usr/bin/env python3
"""Build, validate, tag and push one pinned PyTorch + CUDA image.

    python build.py --cuda 12.8                      build and validate the default variant
    python build.py --cuda 12.1 --push               ... and push it (needs a GPU host,
                                                     or --allow-cpu-validation)
    python build.py list                             the variant matrix
    python build.py render [--check]                 regenerate (or check) the Dockerfiles
    python build.py advisories --from DIR|ZIP        refresh the audit's advisory snapshot

Nothing is tagged before validation passed; nothing is pushed that was not
validated; what is pushed is the very image that was tested.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

from pipeline.errors import EXIT_CODES, PipelineError, UsageError
from pipeline.variants import REPO_ROOT, load_matrix, resolve
from smoke.rules import carried_text

EPILOG = "exit codes:\n" + "\n".join(f"  {code:<4} {text}" for code, text in EXIT_CODES.items())


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line and exit 2, like every other bad input
        self.exit(2, f"build.py: {message} (see --help)\n")


def make_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="build.py",
        description=__doc__.split("\n\n")[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "command",
        nargs="?",
        default="build",
        choices=["build", "list", "render", "lock", "report", "advisories"],
        help="build (default): build, validate, tag and optionally push; list: show the variant matrix; "
        "render: write Dockerfile.cuXXX from images/ (with --check: fail if a committed one differs); "
        "lock: resolve the variant's hash-locked requirements with uv into images/locks/ (with --check: "
        "fail if a lock is stale against the matrix, offline); report: rebuild the HTML pages and "
        "reports/index.html from every report.json under --report-dir; advisories: rewrite the audit's "
        "advisory snapshot in images/advisories/ from --from DIR",
    )
    parser.add_argument(
        "--cuda",
        help="CUDA line to build, e.g. 12.8 or cu128 (default: the matrix's default_cuda); "
        "where it has several torch lines, the first listed unless --torch picks another",
    )
    parser.add_argument(
        "--torch",
        help="torch version to require, e.g. 2.9; refused with a clear message when that torch has no "
        "build for the CUDA line (default: the torch the matrix pins for the line)",
    )
    parser.add_argument(
        "--flavor",
        default="base",
        help="with build or lock: base (default), or a flavor of [flavors] in images/variants.toml, e.g. rlhf "
        "(transformers, TRL, accelerate, PEFT on top of the base image; tags end in -rlhf)",
    )
    parser.add_argument(
        "--push", action="store_true", help="push the validated image (all its tags) to --registry (default: Docker Hub naming)"
    )
    parser.add_argument(
        "--compression",
        choices=("gzip", "zstd", "both"),
        default="gzip",
        help="with --push: how layers are compressed in the registry. gzip (default): every runtime pulls it; "
        "zstd: smaller and faster to unpack, for Docker 23+, containerd 1.5+ (Kubernetes) and podman, not Docker 20.10 "
        "(needs skopeo); both: the tags stay gzip and each also gets a zstd form, TAG-zstd",
    )
    parser.add_argument(
        "--hold-moving-tags",
        action="store_true",
        help="with --push: push the immutable tag only and record the moving ones (e.g. latest) in report.json "
        "(push.held_tags), for a release that moves them after a GPU proof of the pushed digest",
    )
    parser.add_argument("--registry", metavar="HOST[:PORT]", help="registry to push to, e.g. localhost:5000 (with --push)")
    parser.add_argument(
        "--repo", default=None, metavar="NAME", help="repository name of the image (default: the matrix's project name)"
    )
    parser.add_argument(
        "--ca-cert",
        type=Path,
        default=os.environ.get("BUILD_CA_CERT") or None,
        metavar="FILE",
        help="PEM bundle pip inside the build trusts (a TLS-intercepting proxy's CA); passed as a BuildKit "
        "secret, never stored in a layer (default: $BUILD_CA_CERT)",
    )
    parser.add_argument(
        "--allow-cpu-validation",
        action="store_true",
        help="on a host without a GPU, allow --push of an image validated on the CPU only "
        "(the report and the label io.proven-torch.gpu-validated say false)",
    )
    parser.add_argument(
        "--advisories",
        type=Path,
        default=os.environ.get("ADVISORY_DB") or None,
        metavar="DIR|ZIP",
        help="OSV advisory records for PyPI (a folder, osv.dev's PyPI/all.zip or a .jsonl.gz) to audit the "
        "image's Python packages offline; high/critical findings fail validation unless in "
        "images/audit-allowlist.toml (default: $ADVISORY_DB, else the committed snapshot in images/advisories/)",
    )
    parser.add_argument(
        "--from",
        dest="from_dir",
        type=Path,
        metavar="DIR|ZIP",
        help="with advisories: OSV records for PyPI in any form --advisories takes: a folder (.yaml/.json, e.g. a git "
        "checkout of pypa/advisory-database), osv.dev's PyPI/all.zip, or a .jsonl.gz",
    )
    parser.add_argument(
        "--as-of", metavar="YYYY-MM-DD", help="with advisories: the records' date (default: the checkout's last commit)"
    )
    parser.add_argument(
        "--source",
        default="https://github.com/pypa/advisory-database",
        help="with advisories: where the records came from, written into the snapshot (default: %(default)s)",
    )
    parser.add_argument("--report-dir", type=Path, default=REPO_ROOT / "reports", help="where reports go (default: reports/)")
    parser.add_argument("--check", action="store_true", help="with render or lock: fail (exit 2) when a committed file is stale")
    parser.add_argument("--markdown", action="store_true", help="with list: print the table as Markdown (the README's)")
    parser.add_argument("--json", action="store_true", help="with list: print the matrix as JSON (what CI's workflows read)")
    parser.add_argument("--default", action="store_true", help="with list: print the default variant's name (what scripts build)")
    parser.add_argument(
        "--pin",
        metavar="PACKAGE",
        action="append",
        help="with list: print the matrix's requirement line for PACKAGE (from [packages] or a flavor's), "
        "e.g. gymnasium==X.Y.Z, or every line of a flavor when PACKAGE names one (rlhf); repeat it for "
        "several (the host venv shares them)",
    )
    parser.add_argument("--matrix", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("-v", "--verbose", action="store_true", help="stream every build line, not only the steps")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an unexpected error")
    return parser


def carried_advisories(matrix) -> dict[str, dict]:
    """Per variant: every known advisory it carries, whole lock (the snapshot and allowlist's view)."""
    from pipeline.render import AdvisoryInputs, advisories_section, every_variant

    inputs = AdvisoryInputs.load()
    return {v.name: advisories_section(v, inputs) for v in every_variant(matrix)}


def _listed(matrix) -> list:
    """The base variants, each followed by its flavors (a flavor's note says what it adds)."""
    import dataclasses

    out = []
    for v in matrix.variants:
        out.append(v)
        for f in (fv for fv in matrix.flavored_variants() if fv.base_name == v.name):
            adds = ", ".join(f"{name} {version}" for name, version in f.flavor_packages)
            out.append(dataclasses.replace(f, note=f"{f.flavor} flavor of {v.name}: adds {adds}"))
    return out


def variant_table_markdown(matrix) -> str:
    """The README's variant table, made from the matrix (a unit test keeps the README in step)."""
    carried = carried_advisories(matrix)
    as_of = next(iter(carried.values()))["as_of"]
    rows = [
        f"| variant | CUDA | torch | torchvision | torchaudio | Python | min. driver | known advisories, whole lock (as of {as_of}) | builds from | note |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in _listed(matrix):
        name = f"**{v.name}** (default)" if v.is_default else v.name
        rows.append(
            f"| {name} | {v.cuda} | {v.torch} | {v.torchvision} | {v.torchaudio} | {v.python} | {v.min_driver} | {_scoped(carried[v.name])} "
            f"| {_source(v, carried[v.name])} | {v.note} |"
        )
    return "\n".join(rows)


def _source(variant, section: dict) -> str:
    """Where the line's wheels come from, and whether a hash lock is committed for it."""
    locked = section["audited"] == "the whole lock"
    return f"{variant.builds_from}, {'hash-locked' if locked else 'no committed lock (pins)'}"


def _scoped(section: dict) -> str:
    """What a line carries, marked where only its pins were audited (no committed lock)."""
    text = carried_text(section)
    return text if section["audited"] == "the whole lock" else f"{text} (pins only: no committed lock)"


def matrix_json(matrix) -> str:
    """The variant matrix as JSON for CI (GitHub Actions reads it with fromJSON): one entry per
    variant and per flavor of a variant (build it with --cuda, --torch and --flavor)."""
    import json

    from pipeline.render import every_variant

    return json.dumps(
        [
            {"variant": v.name, "cuda": v.cuda, "torch": v.torch_minor, "flavor": v.flavor, "default": v.is_default}
            for v in every_variant(matrix)
        ],
        separators=(",", ":"),
    )


def cmd_list(matrix, markdown: bool = False, as_json: bool = False, default: bool = False, pin: list[str] | None = None) -> int:
    if pin:  # host tools that must match the image (the unit tests run the image's gymnasium and TRL)
        flavors = {flavor.name: dict(flavor.packages) for flavor in matrix.flavors}
        versions = dict(matrix.packages) | {name: v for packages in flavors.values() for name, v in packages.items()}
        lines = []
        for name in pin:
            if name not in versions and name not in flavors:
                raise UsageError(
                    f"--pin {name}: not a package or flavor of images/variants.toml (packages: {', '.join(versions)})"
                )
            lines += [f"{n}=={v}" for n, v in flavors.get(name, {name: versions.get(name)}).items()]
        print("\n".join(lines))
        return 0
    if default:  # what scripts build by default: images/expect/<this>.json, its CUDA line's Dockerfile
        print(next(v.name for v in matrix.variants if v.is_default))
        return 0
    if as_json:
        print(matrix_json(matrix))
        return 0
    if markdown:
        print(variant_table_markdown(matrix))
        return 0
    carried = carried_advisories(matrix)
    print(f"{'variant':15} {'CUDA':5} {'torch':7} {'torchvision':12} {'torchaudio':11} {'Python':7} {'driver>=':10} index")
    for v in _listed(matrix):
        star = "*" if v.is_default else " "
        print(
            f"{v.name + star:15} {v.cuda:5} {v.torch:7} {v.torchvision:12} {v.torchaudio:11} {v.python:7} {v.min_driver:10} {v.index}"
        )
        print(f"{'':15} builds from: {_source(v, carried[v.name])}")
        print(f"{'':15} advisories, {carried[v.name]['audited']}: {carried_text(carried[v.name])}")
        if v.note:
            print(f"{'':15} note: {v.note}")
    first = next(iter(carried.values()))
    print(
        f"* default; advisories: every severity, the build's audit over each line's whole lock (pins only where a "
        f"line has no committed lock), PyPA data as of {first['as_of']} (images/advisories/); high and critical "
        "accepted in images/audit-allowlist.toml"
    )
    return 0


def cmd_render(matrix, check: bool) -> int:
    from pipeline.render import render_all, stale_files

    if check:
        stale = stale_files(matrix)
        if stale:
            names = ", ".join(p.name for p in stale)
            raise UsageError(f"{names} out of date with images/; run `python build.py render` and commit the result")
        print(f"Dockerfiles and specs up to date ({len(matrix.variants)} variants)")
        return 0
    for path in render_all(matrix):
        print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0


def cmd_lock(matrix, cuda: str | None, torch: str | None, check: bool, flavor: str = "base") -> int:
    from pipeline.lock import compile_lock, lock_status, write_lock
    from pipeline.render import render_all

    if check:
        statuses = [lock_status(matrix, v) for v in [*matrix.variants, *matrix.flavored_variants()]]
        for status in statuses:
            print(f"{status.variant}: {status.state}")
        stale = [s.variant for s in statuses if s.state == "stale"]
        if stale:
            raise UsageError(
                f"lock out of date with images/variants.toml for {', '.join(stale)}; run `python build.py lock --cuda ...` and commit"
            )
        return 0
    variant = resolve(matrix, cuda, torch, flavor)
    print(f"==> resolving {variant.name} with uv against {variant.index}", flush=True)
    for path in write_lock(matrix, variant, compile_lock(matrix, variant)):
        print(f"wrote {path.relative_to(REPO_ROOT)}")
    for path in render_all(matrix):
        print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0


def cmd_advisories(from_dir: Path | None, source: str, as_of: str | None) -> int:
    from pipeline.validation.advisories import load_snapshot, write_snapshot

    if from_dir is None:
        raise UsageError(
            "advisories needs --from DIR|ZIP: a checkout of pypa/advisory-database, a folder of OSV records or osv.dev's PyPI/all.zip"
        )
    for path in write_snapshot(from_dir, source, as_of):
        print(f"wrote {path.relative_to(REPO_ROOT)}")
    database = load_snapshot()
    print(f"{len(database.records)} records from {database.source}, as of {database.as_of}")
    return 0


def cmd_build(matrix, args) -> int:
    from pipeline.run import BuildConfig, run

    variant = resolve(matrix, args.cuda, args.torch, args.flavor)
    others = [v for v in matrix.variants if v.cuda == variant.cuda and v.name != variant.base_name]
    if others and args.torch is None:
        print(
            f"==> CUDA {variant.cuda} has torch lines {', '.join(v.torch_minor for v in [variant, *others])}: building "
            f"{variant.name} (the matrix's first); --torch {others[0].torch_minor} builds {others[0].name}",
            flush=True,
        )
    config = BuildConfig(
        matrix=matrix,
        variant=variant,
        push=args.push,
        registry=args.registry,
        repo=args.repo or matrix.name,
        ca_cert=args.ca_cert,
        advisories=args.advisories,
        allow_cpu_validation=args.allow_cpu_validation,
        hold_moving_tags=args.hold_moving_tags,
        compression=args.compression,
        report_dir=args.report_dir,
        verbose=args.verbose,
    )
    result = run(config)
    print("==> done: " + ", ".join(result.tags) + (" (pushed)" if result.pushed else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        matrix = load_matrix(args.matrix)
        if args.command == "list":
            return cmd_list(matrix, args.markdown, args.json, args.default, args.pin)
        if args.command == "report":
            from pipeline.html_report import write_index

            print(f"wrote {write_index(args.report_dir)}")
            return 0
        if args.command == "lock":
            return cmd_lock(matrix, args.cuda, args.torch, args.check, args.flavor)
        if args.command == "advisories":
            return cmd_advisories(args.from_dir, args.source, args.as_of)
        if args.command == "render":
            return cmd_render(matrix, args.check)
        return cmd_build(matrix, args)
    except PipelineError as err:
        print(f"build.py: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("build.py: interrupted; nothing was tagged or pushed", file=sys.stderr)
        return 130
    except Exception as err:  # a bug: one line, the traceback on request
        if args.debug:
            traceback.print_exc()
        print(f"build.py: unexpected error: {type(err).__name__}: {err} (rerun with --debug and report it)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
