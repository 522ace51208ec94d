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
    python build.py keygen DIR                       a key pair to sign pushes with (--sign-key)
    python build.py verify IMAGE_REF --key PUBKEY    check a pushed image's signed proof

Nothing is tagged before validation passed; nothing is pushed that was not
validated; what is pushed is the very image that was tested. This file parses
the command line and dispatches; the work is in pipeline/.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

from pipeline.cli_text import COMMANDS, EPILOG, HELP
from pipeline.errors import PipelineError
from pipeline.variants import AMD64, PLATFORMS, REPO_ROOT, Matrix, load_matrix

GLOBAL_FLAGS = {"--matrix": True, "--debug": False}  # flag: takes a value
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
            flags[name] += [o for o in options if o.startswith("-")]  # positionals are no flag

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
    add("build", "--sign-key", type=Path, default=None, metavar="PRIVATE_KEY")
    add("keygen", "directory", type=Path, metavar="DIR")
    add("verify", "image_ref", metavar="IMAGE_REF")
    add("verify", "--key", type=Path, required=True, metavar="PUBKEY")
    add("verify", "--require-gpu", action="store_true")
    add("build report matrix", "--report-dir", type=Path, default=REPO_ROOT / "reports")
    add("render lock", "--check", action="store_true")
    for option in ("--markdown", "--json", "--default"):
        add("list", option, action="store_true")
    add("verify", "--json", action="store_true")
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


def list_output(matrix: Matrix, args: argparse.Namespace) -> list[str]:
    """What `list` prints: the one output flag's answer (the parser lets at most one through), else the table."""
    from pipeline import listing

    if args.base_image:
        return [matrix.base_image_for(args.base_image)]
    if args.pin:
        return [listing.pin_lines(matrix, args.pin)]
    if args.default:
        return [listing.default_variant(matrix)]
    if args.json:
        return [listing.matrix_json(matrix)]
    return [listing.variant_table_markdown(matrix) if args.markdown else listing.variant_table_text(matrix)]


def dispatch(matrix: Matrix, args: argparse.Namespace) -> int:
    """Hand the parsed values to the command's function in pipeline/ (imported only for its command) and print the
    lines it returns; lock and matrix print as they go. A command fails by raising PipelineError."""
    if args.command == "list":
        return say(list_output(matrix, args))
    if args.command == "render":
        from pipeline.render import render_or_check

        return say(render_or_check(matrix, args.check))
    if args.command == "lock":
        from pipeline.lock import check_locks, relock

        return check_locks(matrix) if args.check else relock(matrix, args.cuda, args.torch, args.flavor)
    if args.command == "advisories":
        from pipeline.validation.advisories import refresh_snapshot

        return say(refresh_snapshot(args.from_dir, args.source, args.as_of))
    if args.command == "keygen":
        from pipeline.signing import keygen_lines

        return say(keygen_lines(args.directory))
    if args.command == "verify":
        from pipeline.verify import verify_and_show

        return say(verify_and_show(args.image_ref, args.key, args.require_gpu, args.json))
    if args.command == "report":
        from pipeline.html_report import rebuild_index

        return say(rebuild_index(args.report_dir))
    shared = {"ca_cert": args.ca_cert, "advisories": args.advisories, "report_dir": args.report_dir, "verbose": args.verbose}
    if args.command == "matrix":
        from pipeline.matrix import run_and_summarize

        return run_and_summarize(matrix, args.line, args.keep, **shared)
    from pipeline.run import build_line

    chosen = {
        "repo": args.repo,
        "push": args.push,
        "registry": args.registry,
        "compression": args.compression,
        "hold_moving_tags": args.hold_moving_tags,
        "allow_cpu_validation": args.allow_cpu_validation,
        "sign_key": args.sign_key,
    }
    return say(build_line(matrix, args.cuda, args.torch, args.flavor, args.platform, **chosen, **shared))


def say(lines: list[str]) -> int:
    """Print the command's lines; 0, its exit status."""
    for line in lines:
        print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser, flags = make_parser()
    args, extra = parser.parse_known_args(_with_command(sys.argv[1:] if argv is None else list(argv)))
    if extra:
        refuse_extra(parser, flags, args.command, extra)
    if args.command == "lock" and args.check and any(getattr(args, name) is not None for name in LOCK_CHECK_TAKES_NO):
        parser.exit(2, "build.py lock: --check checks every line's lock; it takes no --cuda, --torch or --flavor (see --help)\n")
    try:
        return dispatch(load_matrix(args.matrix), args)
    except PipelineError as err:
        print(f"build.py: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("build.py: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # a bug: one line, the traceback on request
        if args.debug:
            traceback.print_exc()
        print(f"build.py: unexpected error: {type(err).__name__}: {err} (rerun with --debug and report it)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
