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
validated; what is pushed is the very image that was tested. This file parses
the command line and dispatches; the work is in pipeline/.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn

from pipeline.errors import EXIT_CODES, PipelineError, UsageError
from pipeline.variants import AMD64, BASE, PLATFORMS, REPO_ROOT, load_matrix, resolve

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
HELP = {  # every flag's help, the same for each command that takes it
    "--debug": "show the traceback of an unexpected error",
    "--cuda": "CUDA line, e.g. 12.8 or cu128 (default: the matrix's default_cuda); where it has several torch lines, the first listed unless --torch picks "
    "another",
    "--torch": "torch version to require, e.g. 2.9; refused with a clear message when that torch has no build for the CUDA line (default: the torch the "
    "matrix pins for the line)",
    "--flavor": "base (default), or a flavor of [flavors] in images/variants.toml, e.g. rlhf (transformers, TRL, accelerate, PEFT on top of the base image; "
    "tags end in -rlhf)",
    "--push": "push the validated image (all its tags) to --registry (default: Docker Hub naming)",
    "--compression": "with --push: how layers are compressed in the registry. gzip (default): every runtime pulls it; zstd: smaller and faster to unpack, "
    "for Docker 23+, containerd 1.5+ (Kubernetes) and podman, not Docker 20.10 (needs skopeo); both: the tags stay gzip and each also gets a zstd form, "
    "TAG-zstd",
    "--hold-moving-tags": "with --push: push the immutable tag only and record the moving ones (e.g. latest) in report.json (push.held_tags), for a release "
    "that moves them after a GPU proof of the pushed digest",
    "--platform": "the platform to build and validate (default: %(default)s); linux/arm64 runs under qemu on an amd64 host (scripts/prepare-host.sh --arm64) "
    "for the lines that list it (build.py list); all: every platform of the line, and with --push one multi-arch index under the line's tags",
    "--registry": "registry to push to, e.g. localhost:5000 (with --push)",
    "--repo": "repository name of the image (default: the matrix's project name)",
    "--ca-cert": "PEM bundle pip inside the build trusts (a TLS-intercepting proxy's CA); passed as a BuildKit secret, never stored in a layer (default: "
    "$BUILD_CA_CERT)",
    "--advisories": "OSV advisory records for PyPI (a folder, osv.dev's PyPI/all.zip or a .jsonl.gz) to audit the image's Python packages offline; "
    "high/critical findings fail validation unless in images/audit-allowlist.toml (default: $ADVISORY_DB, else the committed snapshot in images/advisories/)",
    "--verbose": "stream every build line, not only the steps",
    "--allow-cpu-validation": "on a host without a GPU, allow --push of an image validated on the CPU only (the report and the label "
    "io.proven-torch.gpu-validated say false)",
    "--report-dir": "where reports go (default: reports/)",
    "--check": "fail (exit 2) when a committed file is stale",
    "--markdown": "print the table as Markdown (the README's)",
    "--json": "print the matrix as JSON (what CI's workflows read)",
    "--default": "print the default variant's name (what scripts build)",
    "--base-image": "print the base image for PLATFORM (linux/amd64 or linux/arm64: docker-library's per-architecture name), what scripts/prepare-host.sh "
    "pulls or makes",
    "--pin": "print the matrix's requirement line for PACKAGE (from [packages] or a flavor's), e.g. gymnasium==X.Y.Z, or every line of a flavor when PACKAGE "
    "names one (rlhf); repeat it for several (the host venv shares them)",
    "--from": "OSV records for PyPI in any form --advisories takes: a folder (.yaml/.json, e.g. a git checkout of pypa/advisory-database), osv.dev's "
    "PyPI/all.zip, or a .jsonl.gz",
    "--as-of": "the records' date (default: the checkout's last commit)",
    "--source": "where the records came from, written into the snapshot (default: %(default)s)",
    "--line": "only this line (repeat for several; default: every base line of the matrix)",
    "--keep": "keep each image after its proof (default: remove it, to free disk)",
}
LOCK_CHECK_TAKES_NO = ("cuda", "torch", "flavor")


class _Parser(argparse.ArgumentParser):
    """One line and exit 2 for every bad input."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def make_parser() -> tuple[argparse.ArgumentParser, dict[str, list[str]]]:
    """The parser, and the flags of each command as they were added (refuse_extra names the command a stray flag is of)."""
    fmt = argparse.RawDescriptionHelpFormatter
    parser = _Parser(prog="build.py", description=__doc__.split("\n\n")[0], epilog=EPILOG, formatter_class=fmt)
    parser.add_argument("--matrix", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--debug", action="store_true", help=HELP["--debug"])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    cmds = {
        n: sub.add_parser(n, help=t, description=f"build.py {n}: {t}", epilog=EPILOG, formatter_class=fmt)
        for n, t in COMMANDS.items()
    }
    into = {**cmds, "list": cmds["list"].add_mutually_exclusive_group()}  # list prints one thing: two of its flags exit 2
    flags: dict[str, list[str]] = {name: [] for name in COMMANDS}

    def add(names: str, *options: str, **settings: Any) -> None:
        for name in names.split():
            into[name].add_argument(*options, help=HELP[options[-1]], **settings)
            flags[name] += options

    for option in ("--cuda", "--torch", "--flavor"):  # default None: `lock --check` refuses them when given
        add("build lock", option)
    add("build", "--push", action="store_true")
    add("build", "--compression", choices=("gzip", "zstd", "both"), default="gzip")
    add("build", "--hold-moving-tags", action="store_true")
    add("build", "--platform", default=AMD64, choices=[*PLATFORMS, "all"])
    add("build", "--registry", metavar="HOST[:PORT]")
    add("build", "--repo", metavar="NAME")
    add("build matrix", "--ca-cert", type=Path, default=os.environ.get("BUILD_CA_CERT") or None, metavar="FILE")
    add("build matrix", "--advisories", type=Path, default=os.environ.get("ADVISORY_DB") or None, metavar="DIR|ZIP")
    add("build matrix", "-v", "--verbose", action="store_true")
    add("build", "--allow-cpu-validation", action="store_true")
    add("build report matrix", "--report-dir", type=Path, default=REPO_ROOT / "reports")
    add("render lock", "--check", action="store_true")
    for option in ("--markdown", "--json", "--default"):
        add("list", option, action="store_true")
    add("list", "--base-image", metavar="PLATFORM", choices=list(PLATFORMS))
    add("list", "--pin", metavar="PACKAGE", action="append")
    add("advisories", "--from", dest="from_dir", type=Path, metavar="DIR|ZIP")
    add("advisories", "--as-of", metavar="YYYY-MM-DD")
    add("advisories", "--source", default="https://github.com/pypa/advisory-database")
    add("matrix", "--line", action="append", metavar="VARIANT")
    add("matrix", "--keep", action="store_true")
    return parser, flags


def refuse_extra(parser: argparse.ArgumentParser, flags: dict[str, list[str]], command: str, extra: list[str]) -> NoReturn:
    """Arguments the command does not take: a flag of another command names the command that takes it."""
    for arg in extra:
        flag = arg.split("=", 1)[0]
        takes = [name for name, options in flags.items() if flag in options and name != command]
        if takes:
            which = " and ".join(f"`build.py {name}`" for name in takes)
            parser.exit(2, f"build.py {command}: {flag} is a flag of {which}, not of `{command}` (see --help)\n")
    parser.exit(2, f"build.py {command}: unrecognized arguments: {' '.join(extra)} (see --help)\n")


def _with_command(argv: list[str]) -> list[str]:
    """`build` is the default command: `build.py --cuda 12.1 --push` means `build.py build --cuda 12.1 --push`."""
    i = 0
    while i < len(argv) and argv[i] in GLOBAL_FLAGS:
        i += 2 if GLOBAL_FLAGS[argv[i]] else 1
    if i < len(argv) and argv[i] in COMMANDS:
        return argv
    return [*argv[:i], "build", *argv[i:]]  # `--help` too: the default command's flags, the commands in its epilog


def cmd_list(matrix, args) -> int:
    """Print what the output flag asks for (the parser lets at most one through), else the table."""
    from pipeline import listing

    if args.base_image:
        print(matrix.base_image_for(args.base_image))
    elif args.pin:
        print(listing.pin_lines(matrix, args.pin))
    elif args.default:
        print(listing.default_variant(matrix))
    elif args.json:
        print(listing.matrix_json(matrix))
    else:
        print(listing.variant_table_markdown(matrix) if args.markdown else listing.variant_table_text(matrix))
    return 0


def cmd_render(matrix, args) -> int:
    from pipeline.render import render_all, stale_files

    if args.check:
        stale = stale_files(matrix)
        if stale:
            names = ", ".join(p.name for p in stale)
            raise UsageError(f"{names} out of date with images/; run `python build.py render` and commit the result")
        print(f"Dockerfiles and specs up to date ({len(matrix.variants)} variants)")
        return 0
    return _wrote(render_all(matrix))


def cmd_lock(matrix, args) -> int:
    from pipeline.lock import compile_lock, lock_statuses, write_lock
    from pipeline.render import render_all
    from pipeline.variants import arch

    if args.check:
        statuses = [s for v in [*matrix.variants, *matrix.flavored_variants()] for s in lock_statuses(matrix, v)]
        for status in statuses:
            print(f"{status.variant} ({arch(status.platform)}): {status.state}")
        stale = [f"{s.variant} ({arch(s.platform)})" for s in statuses if s.state == "stale"]
        if stale:
            raise UsageError(
                f"lock out of date with images/variants.toml for {', '.join(stale)}; run `python build.py lock --cuda ...` and commit"
            )
        return 0
    variant = resolve(matrix, args.cuda, args.torch, BASE if args.flavor is None else args.flavor)
    for platform in variant.platforms:
        print(f"==> resolving {variant.name} for {platform} with uv against {variant.index}", flush=True)
        _wrote(write_lock(matrix, variant, compile_lock(matrix, variant, platform), platform=platform))
    return _wrote(render_all(matrix))


def cmd_advisories(matrix, args) -> int:
    from pipeline.validation.advisories import load_snapshot, write_snapshot

    if args.from_dir is None:
        raise UsageError(
            "advisories needs --from DIR|ZIP: a checkout of pypa/advisory-database, a folder of OSV records or osv.dev's PyPI/all.zip"
        )
    _wrote(write_snapshot(args.from_dir, args.source, args.as_of))
    database = load_snapshot()
    print(f"{len(database.records)} records from {database.source}, as of {database.as_of}")
    return 0


def cmd_report(matrix, args) -> int:
    from pipeline.html_report import write_index

    print(f"wrote {write_index(args.report_dir)}")
    return 0


def _wrote(paths: Iterable[Path]) -> int:
    """Name each file written; 0, the command's exit status."""
    for path in paths:
        print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0


def _config(matrix, args, **settings: Any):
    """The run's BuildConfig: the flags `build` and `matrix` share, and `settings`."""
    from pipeline.run import BuildConfig

    shared = {name: getattr(args, name) for name in ("ca_cert", "advisories", "report_dir", "verbose")}
    return BuildConfig(matrix=matrix, **shared, **settings)


def cmd_build(matrix, args) -> int:
    from pipeline.run import run

    variant = resolve(matrix, args.cuda, args.torch, BASE if args.flavor is None else args.flavor)
    others = [v for v in matrix.variants if v.cuda == variant.cuda and v.name != variant.base_name]
    if others and args.torch is None:
        print(
            f"==> CUDA {variant.cuda} has torch lines {', '.join(v.torch_minor for v in [variant, *others])}: building "
            f"{variant.name} (the matrix's first); --torch {others[0].torch_minor} builds {others[0].name}",
            flush=True,
        )
    flags = ("push", "registry", "allow_cpu_validation", "hold_moving_tags", "compression")
    platforms = variant.platforms if args.platform == "all" else (args.platform,)
    chosen = {name: getattr(args, name) for name in flags}
    result = run(_config(matrix, args, variant=variant, repo=args.repo or matrix.name, platforms=platforms, **chosen))
    print("==> done: " + ", ".join(result.tags) + (" (pushed)" if result.pushed else ""))
    if result.index:
        print("==> multi-arch: " + ", ".join(f"{ref} ({digest[:19]})" for ref, digest in result.index.items()))
    return 0


def cmd_matrix(matrix, args) -> int:
    """Every chosen line, built and proven in turn (no push); one summary table; exit 5 if a buildable line failed."""
    from pipeline.errors import ValidationFailed
    from pipeline.matrix import markdown, run_matrix, write_summary
    from smoke.proof import host_cpu

    config = _config(matrix, args, variant=resolve(matrix, None), repo=matrix.name, push=False, allow_cpu_validation=True)
    rows = run_matrix(matrix, config, args.line, args.keep)
    md, js = write_summary(rows, args.report_dir, host_cpu())
    print(markdown(rows, host_cpu(), "today"), end="")
    print(f"==> matrix summary: {md.relative_to(REPO_ROOT) if md.is_relative_to(REPO_ROOT) else md} and {js.name}")
    failed = [r.line for r in rows if r.status == "failed"]
    if failed:
        raise ValidationFailed(f"matrix: {', '.join(failed)} failed; see {md}")
    return 0


HANDLERS = {
    "build": cmd_build,
    "list": cmd_list,
    "render": cmd_render,
    "lock": cmd_lock,
    "report": cmd_report,
    "advisories": cmd_advisories,
    "matrix": cmd_matrix,
}


def main(argv: list[str] | None = None) -> int:
    parser, flags = make_parser()
    args, extra = parser.parse_known_args(_with_command(sys.argv[1:] if argv is None else list(argv)))
    if extra:
        refuse_extra(parser, flags, args.command, extra)
    if args.command == "lock" and args.check and any(getattr(args, name) is not None for name in LOCK_CHECK_TAKES_NO):
        parser.exit(2, "build.py lock: --check checks every line's lock; it takes no --cuda, --torch or --flavor (see --help)\n")
    try:
        return HANDLERS[args.command](load_matrix(args.matrix), args)
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
