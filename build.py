#!/usr/bin/env python3
"""Build, validate, tag and push one pinned PyTorch + CUDA image.

    python build.py --cuda 12.8                      build and validate the default variant
    python build.py --cuda 12.1 --push               ... and push it (needs a GPU host,
                                                     or --allow-cpu-validation); `build` is
                                                     the default command
    python build.py --cuda 13.0 --platform all       amd64 and arm64 (under qemu), one index
    python build.py list                             the variant matrix
    python build.py render [--check]                 regenerate (or check) the Dockerfiles
    python build.py matrix [--line VARIANT]          build and prove every line this host can
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
from pipeline.variants import AMD64, BASE, PLATFORMS, REPO_ROOT, load_matrix, resolve
from smoke.rules import carried_text

EPILOG = "exit codes:\n" + "\n".join(f"  {code:<4} {text}" for code, text in EXIT_CODES.items())


COMMANDS = {
    "build": "build, validate, tag and optionally push one line (the default command)",
    "list": "show the variant matrix: pins, how each line builds, what it carries",
    "render": "write the Dockerfiles (one per CUDA line) and specs from images/ (--check: fail on drift)",
    "lock": "resolve a line's hash-locked requirements with uv into images/locks/ (--check: offline staleness)",
    "report": "rebuild the HTML pages and reports/index.html from every report.json under --report-dir",
    "advisories": "rewrite the audit's advisory snapshot in images/advisories/ from --from DIR|ZIP",
    "matrix": "build and prove every line this host can build, one after another, and write one summary table",
}
EPILOG = (
    "commands (python build.py COMMAND --help):\n"
    + "\n".join(f"  {name:<11} {text}" for name, text in COMMANDS.items())
    + "\n\nexit codes:\n"
    + "\n".join(f"  {code:<4} {text}" for code, text in EXIT_CODES.items())
)
GLOBAL_FLAGS = {"--matrix": True, "--debug": False}  # flag: takes a value


class _Parser(argparse.ArgumentParser):
    """One line and exit 2 for every bad input."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def refuse_extra(parser: argparse.ArgumentParser, command: str, extra: list[str]) -> None:
    """Arguments the command does not take: a flag of another command names the command that takes it."""
    owners: dict[str, list[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, cmd in action.choices.items():
                for flag in (f for a in cmd._actions for f in a.option_strings):
                    owners.setdefault(flag, []).append(name)
    for arg in extra:
        takes = [c for c in owners.get(arg.split("=", 1)[0], []) if c != command]
        if takes:
            which = " and ".join(f"`build.py {c}`" for c in takes)
            parser.exit(2, f"build.py {command}: {arg.split('=', 1)[0]} is a flag of {which}, not of `{command}` (see --help)\n")
    parser.exit(2, f"build.py {command}: unrecognized arguments: {' '.join(extra)} (see --help)\n")


def make_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="build.py",
        description=__doc__.split("\n\n")[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--matrix", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--debug", action="store_true", help="show the traceback of an unexpected error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    cmds = {}
    for name, text in COMMANDS.items():
        cmds[name] = sub.add_parser(
            name,
            help=text,
            description=f"build.py {name}: {text}",
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    build, lock, matrix = cmds["build"], cmds["lock"], cmds["matrix"]

    for cmd in (build, lock):
        cmd.add_argument(
            "--cuda",
            help="CUDA line, e.g. 12.8 or cu128 (default: the matrix's default_cuda); where it has several "
            "torch lines, the first listed unless --torch picks another",
        )
        cmd.add_argument(
            "--torch",
            help="torch version to require, e.g. 2.9; refused with a clear message when that torch has no "
            "build for the CUDA line (default: the torch the matrix pins for the line)",
        )
        cmd.add_argument(
            "--flavor",
            default=BASE,
            help="base (default), or a flavor of [flavors] in images/variants.toml, e.g. "
            "rlhf (transformers, TRL, accelerate, PEFT on top of the base image; tags end in -rlhf)",
        )
    build.add_argument(
        "--push",
        action="store_true",
        help="push the validated image (all its tags) to --registry (default: Docker Hub naming)",
    )
    build.add_argument(
        "--compression",
        choices=("gzip", "zstd", "both"),
        default="gzip",
        help="with --push: how layers are compressed in the registry. gzip (default): every runtime pulls it; zstd: smaller "
        "and faster to unpack, for Docker 23+, containerd 1.5+ (Kubernetes) and podman, not Docker 20.10 (needs skopeo); "
        "both: the tags stay gzip and each also gets a zstd form, TAG-zstd",
    )
    build.add_argument(
        "--hold-moving-tags",
        action="store_true",
        help="with --push: push the immutable tag only and record the moving ones (e.g. latest) in report.json "
        "(push.held_tags), for a release that moves them after a GPU proof of the pushed digest",
    )
    build.add_argument(
        "--platform",
        default=AMD64,
        choices=[*PLATFORMS, "all"],
        help="the platform to build and validate (default: %(default)s); linux/arm64 runs under qemu on an amd64 host "
        "(scripts/prepare-host.sh --arm64) for the lines that list it (build.py list); all: every platform of the line, "
        "and with --push one multi-arch index under the line's tags",
    )
    build.add_argument("--registry", metavar="HOST[:PORT]", help="registry to push to, e.g. localhost:5000 (with --push)")
    build.add_argument(
        "--repo", default=None, metavar="NAME", help="repository name of the image (default: the matrix's project name)"
    )
    for cmd in (build, matrix):
        cmd.add_argument(
            "--ca-cert",
            type=Path,
            default=os.environ.get("BUILD_CA_CERT") or None,
            metavar="FILE",
            help="PEM bundle pip inside the build trusts (a TLS-intercepting proxy's CA); passed as a BuildKit secret, "
            "never stored in a layer (default: $BUILD_CA_CERT)",
        )
        cmd.add_argument(
            "--advisories",
            type=Path,
            default=os.environ.get("ADVISORY_DB") or None,
            metavar="DIR|ZIP",
            help="OSV advisory records for PyPI (a folder, osv.dev's PyPI/all.zip or a .jsonl.gz) to audit the image's "
            "Python packages offline; high/critical findings fail validation unless in images/audit-allowlist.toml "
            "(default: $ADVISORY_DB, else the committed snapshot in images/advisories/)",
        )
        cmd.add_argument("-v", "--verbose", action="store_true", help="stream every build line, not only the steps")
    build.add_argument(
        "--allow-cpu-validation",
        action="store_true",
        help="on a host without a GPU, allow --push of an image validated on the CPU only "
        "(the report and the label io.proven-torch.gpu-validated say false)",
    )
    for cmd in (build, cmds["report"], matrix):
        cmd.add_argument("--report-dir", type=Path, default=REPO_ROOT / "reports", help="where reports go (default: reports/)")
    for cmd in (cmds["render"], lock):
        cmd.add_argument("--check", action="store_true", help="fail (exit 2) when a committed file is stale")
    listing = cmds["list"]
    listing.add_argument("--markdown", action="store_true", help="print the table as Markdown (the README's)")
    listing.add_argument("--json", action="store_true", help="print the matrix as JSON (what CI's workflows read)")
    listing.add_argument("--default", action="store_true", help="print the default variant's name (what scripts build)")
    listing.add_argument(
        "--base-image",
        metavar="PLATFORM",
        choices=list(PLATFORMS),
        help="print the base image for PLATFORM (linux/amd64 or linux/arm64: docker-library's per-architecture "
        "name), what scripts/prepare-host.sh pulls or makes",
    )
    listing.add_argument(
        "--pin",
        metavar="PACKAGE",
        action="append",
        help="print the matrix's requirement line for PACKAGE (from [packages] or a flavor's), e.g. gymnasium==X.Y.Z, or "
        "every line of a flavor when PACKAGE names one (rlhf); repeat it for several (the host venv shares them)",
    )
    adv = cmds["advisories"]
    adv.add_argument(
        "--from",
        dest="from_dir",
        type=Path,
        metavar="DIR|ZIP",
        help="OSV records for PyPI in any form --advisories takes: a folder (.yaml/.json, e.g. a git checkout of "
        "pypa/advisory-database), osv.dev's PyPI/all.zip, or a .jsonl.gz",
    )
    adv.add_argument("--as-of", metavar="YYYY-MM-DD", help="the records' date (default: the checkout's last commit)")
    adv.add_argument(
        "--source",
        default="https://github.com/pypa/advisory-database",
        help="where the records came from, written into the snapshot (default: %(default)s)",
    )
    matrix.add_argument(
        "--line",
        action="append",
        metavar="VARIANT",
        help="only this line (repeat for several; default: every base line of the matrix)",
    )
    matrix.add_argument("--keep", action="store_true", help="keep each image after its proof (default: remove it, to free disk)")

    return parser


def _with_command(argv: list[str]) -> list[str]:
    """`build` is the default command: `build.py --cuda 12.1 --push` means `build.py build --cuda 12.1 --push`."""
    i = 0
    while i < len(argv) and argv[i] in GLOBAL_FLAGS:
        i += 2 if GLOBAL_FLAGS[argv[i]] else 1
    if i < len(argv) and argv[i] in COMMANDS:
        return argv
    return [*argv[:i], "build", *argv[i:]]  # `--help` too: the default command's flags, the commands in its epilog


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
        "| variant | CUDA | torch | torchvision | torchaudio | Python | min. driver | platforms "
        f"| known advisories, whole lock (as of {as_of}) | builds from | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in _listed(matrix):
        name = f"**{v.name}** (default)" if v.is_default else v.name
        rows.append(
            f"| {name} | {v.cuda} | {v.torch} | {v.torchvision} | {v.torchaudio} | {v.python} | {v.min_driver} | {_arches(v)} | {_scoped(carried[v.name])} "
            f"| {_source(v, carried[v.name])} | {v.note} |"
        )
    return "\n".join(rows)


def _arches(variant) -> str:
    """'amd64, arm64': the architectures the line is built for."""
    from pipeline.variants import arch

    return ", ".join(arch(p) for p in variant.platforms)


def _source(variant, section: dict) -> str:
    """Where the line's wheels come from, and whether a hash lock is committed for it."""
    from pipeline.render import WHOLE_LOCK

    locked = section["audited"] == WHOLE_LOCK
    return f"{variant.builds_from}, {'hash-locked' if locked else 'no committed lock (pins)'}"


def _scoped(section: dict) -> str:
    """What a line carries, marked where only its pins were audited (no committed lock)."""
    from pipeline.render import WHOLE_LOCK

    text = carried_text(section)
    return text if section["audited"] == WHOLE_LOCK else f"{text} (pins only: no committed lock)"


def matrix_json(matrix) -> str:
    """The variant matrix as JSON for CI (GitHub Actions reads it with fromJSON): one entry per
    variant and per flavor of a variant (build it with --cuda, --torch and --flavor), with the
    platforms it is built for (the release builds a multi-arch line's arm64 image on an Arm runner)."""
    import json

    from pipeline.render import every_variant

    return json.dumps(
        [
            {
                "variant": v.name,
                "cuda": v.cuda,
                "torch": v.torch_minor,
                "flavor": v.flavor,
                "default": v.is_default,
                "platforms": list(v.platforms),
                "multi_arch": v.multi_arch,
            }
            for v in every_variant(matrix)
        ],
        separators=(",", ":"),
    )


def cmd_list(
    matrix,
    markdown: bool = False,
    as_json: bool = False,
    default: bool = False,
    pin: list[str] | None = None,
    base_image: str | None = None,
) -> int:
    if base_image:
        print(matrix.base_image_for(base_image))
        return 0
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
        print(f"{'':15} platforms: {_arches(v)}" + (f" ({v.platforms_note})" if v.platforms_note else ""))
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


def cmd_lock(matrix, cuda: str | None, torch: str | None, check: bool, flavor: str = BASE) -> int:
    from pipeline.lock import compile_lock, lock_statuses, write_lock
    from pipeline.render import render_all
    from pipeline.variants import arch

    if check:
        statuses = [s for v in [*matrix.variants, *matrix.flavored_variants()] for s in lock_statuses(matrix, v)]
        for status in statuses:
            print(f"{status.variant} ({arch(status.platform)}): {status.state}")
        stale = [f"{s.variant} ({arch(s.platform)})" for s in statuses if s.state == "stale"]
        if stale:
            raise UsageError(
                f"lock out of date with images/variants.toml for {', '.join(stale)}; run `python build.py lock --cuda ...` and commit"
            )
        return 0
    variant = resolve(matrix, cuda, torch, flavor)
    for platform in variant.platforms:
        print(f"==> resolving {variant.name} for {platform} with uv against {variant.index}", flush=True)
        for path in write_lock(matrix, variant, compile_lock(matrix, variant, platform), platform=platform):
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
        platforms=variant.platforms if args.platform == "all" else (args.platform,),
    )
    result = run(config)
    print("==> done: " + ", ".join(result.tags) + (" (pushed)" if result.pushed else ""))
    if result.index:
        print("==> multi-arch: " + ", ".join(f"{ref} ({digest[:19]})" for ref, digest in result.index.items()))
    return 0


def cmd_matrix(matrix, args) -> int:
    """Every chosen line, built and proven in turn (no push); one summary table; exit 5 if a buildable line failed."""
    from pipeline.errors import ValidationFailed
    from pipeline.matrix import markdown, run_matrix, write_summary
    from pipeline.run import BuildConfig
    from smoke.proof import host_cpu

    config = BuildConfig(
        matrix=matrix,
        variant=resolve(matrix, None),
        push=False,
        registry=None,
        repo=matrix.name,
        ca_cert=args.ca_cert,
        advisories=args.advisories,
        allow_cpu_validation=True,
        report_dir=args.report_dir,
        verbose=args.verbose,
    )
    rows = run_matrix(matrix, config, args.line, args.keep)
    md, js = write_summary(rows, args.report_dir, host_cpu())
    print(markdown(rows, host_cpu(), "today"), end="")
    print(f"==> matrix summary: {md.relative_to(REPO_ROOT) if md.is_relative_to(REPO_ROOT) else md} and {js.name}")
    failed = [r.line for r in rows if r.status == "failed"]
    if failed:
        raise ValidationFailed(f"matrix: {', '.join(failed)} failed; see {md}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args, extra = parser.parse_known_args(_with_command(sys.argv[1:] if argv is None else list(argv)))
    if extra:
        refuse_extra(parser, args.command, extra)
    try:
        matrix = load_matrix(args.matrix)
        if args.command == "list":
            return cmd_list(matrix, args.markdown, args.json, args.default, args.pin, args.base_image)
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
        if args.command == "matrix":
            return cmd_matrix(matrix, args)
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
