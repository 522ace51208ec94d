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
    python build.py keygen DIR [--encrypt]           a key pair to sign pushes with (--sign-key)
    python build.py verify IMAGE_REF --key PUBKEY    check a pushed image's signed proof
    python build.py sign IMAGE@DIGEST --report R --proof P --sign-key KEY
                                                     sign a pushed digest after its (GPU) proof passed
    python build.py attach IMAGE@DIGEST --prepared DIR --signed FILE
                                                     attach envelopes signed apart (the release)
    python build.py withdraw IMAGE@DIGEST            remove a pushed digest whose proof failed

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

from common import cli
from common.deadlines import DEADLINES
from common.rules import MAX_SLOWDOWN
from common.rules import STALE_AFTER_DAYS as DEFAULT_MAX_AGE  # verify --max-age: the age at which advisory data is stale
from pipeline.cli_text import COMMANDS, EPILOG, HELP
from pipeline.errors import PipelineError, UsageError
from pipeline.variants import AMD64, PLATFORMS, REPO_ROOT, Matrix, load_matrix

OWN_PACKAGES = ("build", "pipeline", "common", "smoke", "ppo_bench", "rlhf_bench", "container", "tests", "scripts")

GLOBAL_FLAGS = {"--matrix": True, "--debug": False}  # flag: takes a value
LOCK_CHECK_TAKES_NO = ("cuda", "torch", "flavor")


def make_parser() -> tuple[argparse.ArgumentParser, dict[str, list[str]]]:
    """The parser, and the flags of each command as they were added (refuse_extra names the command a stray flag is of)."""
    fmt = argparse.RawDescriptionHelpFormatter
    parser = cli.OneLineParser(prog="build.py", description=__doc__.split("\n\n")[0], epilog=EPILOG, formatter_class=fmt)
    parser.add_argument("--matrix", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--debug", action="store_true", help=HELP["--debug"])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=cli.OneLineParser)
    cmds = {
        n: sub.add_parser(n, help=t, description=f"build.py {n}: {t}", epilog=EPILOG, formatter_class=fmt)
        for n, t in COMMANDS.items()
    }

    into = {**cmds, "list": cmds["list"].add_mutually_exclusive_group()}  # list prints one thing: two of its flags exit 2
    flags: dict[str, list[str]] = {name: ["--debug"] for name in COMMANDS}
    for command in cmds.values():  # --debug before or after the command; SUPPRESS keeps the global value when absent
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=HELP["--debug"])

    def add(names: str, *options: str, **settings: Any) -> None:
        for name in names.split():  # a command's own help for a shared flag ("list --json") before the shared one
            into[name].add_argument(*options, help=HELP.get(f"{name} {options[-1]}") or HELP[options[-1]], **settings)
            flags[name] += [o for o in options if o.startswith("-")]  # positionals are no flag

    for option in ("--cuda", "--torch", "--flavor"):  # default None: `lock --check` refuses them when given
        add("build lock", option)
    add("build", "--push", action="store_true")
    add("build", "--compression", choices=("gzip", "zstd", "both"), default="gzip")
    add("build", "--hold-moving-tags", action="store_true")
    add("build", "--platform", default=AMD64, choices=[*PLATFORMS, "all"])
    add("build", "--registry", metavar="HOST[:PORT]")
    add("build", "--repo", metavar="NAME")
    add("build matrix rebuild", "--ca-cert", type=Path, default=os.environ.get("BUILD_CA_CERT") or None, metavar="FILE")
    add("build matrix", "--advisories", type=Path, default=os.environ.get("ADVISORY_DB") or None, metavar="DIR|ZIP")
    add("build matrix rebuild", "-v", "--verbose", action="store_true")
    add("build", "--allow-cpu-validation", action="store_true")
    add("build sign", "--sign-key", type=Path, default=None, metavar="PRIVATE_KEY")
    add("build sign keygen", "--sign-key-passphrase-file", type=Path, default=None, metavar="FILE")
    add("keygen", "directory", type=Path, metavar="DIR")
    add("keygen", "--encrypt", action="store_true")
    add("verify rebuild", "image_ref", metavar="IMAGE_REF")
    add("rebuild", "--source", type=Path, metavar="DIR")
    add("rebuild", "--out", type=Path, default=Path("rebuild-report"), metavar="DIR")
    add("sign withdraw attach", "signed_ref", metavar="IMAGE@DIGEST")
    add("verify diff rebuild", "--key", type=Path, required=True, action="append", metavar="PUBKEY")
    add("verify sign", "--require-gpu", action="store_true")
    add("verify", "--expect-line", metavar="LINE")
    add("verify diff", "--max-age", type=int, default=DEFAULT_MAX_AGE, metavar="DAYS")
    add("verify sign withdraw attach diff rebuild", "--timeout", type=float, default=DEADLINES["verify"], metavar="SECONDS")
    add("sign", "--report", type=Path, metavar="REPORT_JSON")
    add("sign", "--children", type=Path, nargs="+", metavar="DIR")
    add("sign", "--proof", type=Path, metavar="PROOF_JSON")
    add("sign", "--run-name", metavar="NAME")
    add("sign", "--prepare", type=Path, metavar="DIR")
    add("attach", "--prepared", type=Path, required=True, metavar="DIR")
    add("attach", "--signed", type=Path, required=True, metavar="SIGNED_JSON")
    add("build report matrix", "--report-dir", type=Path, default=REPO_ROOT / "reports")
    add("render lock", "--check", action="store_true")
    for option in ("--markdown", "--json", "--default"):
        add("list", option, action="store_true")
    add("verify", "--json", action="store_true")
    into["diff"] = cmds["diff"].add_mutually_exclusive_group()  # one output
    add("diff", "--json", action="store_true")
    add("diff", "--markdown", action="store_true")
    into["diff"] = cmds["diff"]
    add("diff", "--advisories", type=Path, default=None, metavar="DIR|ZIP")
    add("diff", "--platform", default=AMD64, choices=list(PLATFORMS))
    add("list", "--base-image", metavar="PLATFORM", choices=list(PLATFORMS))
    add("list", "--pin", metavar="PACKAGE", action="append")
    add("diff", "image_a", metavar="A")
    add("diff", "image_b", metavar="B")
    add("diff", "--max-slowdown", type=float, default=MAX_SLOWDOWN, metavar="FRACTION")
    cmds["list"].add_argument("--here", action="store_true", help=HELP["--here"])  # with the table or --json
    flags["list"].append("--here")
    add("advisories", "--from", dest="from_dir", type=Path, metavar="DIR|ZIP")
    add("advisories", "--as-of", metavar="YYYY-MM-DD")
    add("advisories", "--source", default="https://github.com/pypa/advisory-database")
    add("matrix", "--line", action="append", metavar="VARIANT")
    add("matrix", "--keep", action="store_true")
    return parser, flags


def refuse_extra(flags: dict[str, list[str]], command: str, extra: list[str]) -> NoReturn:
    """Arguments the command does not take: a flag of another command names the command that takes it."""
    for arg in extra:
        flag = arg.split("=", 1)[0]
        takes = [name for name, options in flags.items() if flag in options and name != command]
        if takes:
            which = " and ".join(f"`build.py {name}`" for name in takes)
            raise UsageError(f"{flag} is a flag of {which}, not of `{command}`", f"build.py {command}")
    raise UsageError(f"unrecognized arguments: {' '.join(extra)}", f"build.py {command}")


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line as a Namespace; UsageError (with the command it is about) for any bad input."""
    parser, flags = make_parser()
    try:
        words = _with_command(argv)
    except UnknownCommand as err:
        raise UsageError(f"{str(err)[:80]!r} is no command; the commands: {', '.join(COMMANDS)}", "build.py") from None
    args, extra = parser.parse_known_args(words)
    if extra:
        refuse_extra(flags, args.command, extra)
    if args.command == "lock" and args.check and any(getattr(args, name) is not None for name in LOCK_CHECK_TAKES_NO):
        raise UsageError("--check checks every line's lock; it takes no --cuda, --torch or --flavor", "build.py lock")
    return args


def _with_command(argv: list[str]) -> list[str]:
    """`build` is the default command: `build.py --cuda 12.1 --push` means `build.py build --cuda 12.1 --push`."""
    i = 0
    while i < len(argv) and argv[i] in GLOBAL_FLAGS:
        i += 2 if GLOBAL_FLAGS[argv[i]] else 1
    if i < len(argv) and argv[i] in COMMANDS:
        return argv
    if i < len(argv) and not argv[i].startswith("-"):
        raise UnknownCommand(argv[i])
    return [*argv[:i], "build", *argv[i:]]  # `--help` too: the default command's flags, the commands in its epilog


class UnknownCommand(Exception):
    """A first word that is no command of build.py (build's flags all start with a dash)."""


def list_output(matrix: Matrix, args: argparse.Namespace) -> list[str]:
    """What `list` prints: the one output flag's answer (the parser lets at most one through), else the table."""
    from pipeline import listing

    if args.base_image:
        return [matrix.base_image_for(args.base_image)]
    if args.pin:
        return [listing.pin_lines(matrix, args.pin)]
    if args.default:
        return [listing.default_variant(matrix)]
    here = None
    if args.here:
        if args.markdown or args.default or args.pin or args.base_image:
            raise UsageError(
                "build.py list: --here goes with the table or --json, not with --markdown, --default, --pin or --base-image"
            )
        here = listing.probe(matrix, Path(os.environ["BUILD_CA_CERT"]) if os.environ.get("BUILD_CA_CERT") else None)
    if args.json:
        return [listing.matrix_json(matrix, here)]
    return [listing.variant_table_markdown(matrix) if args.markdown else listing.variant_table_text(matrix, here)]


def dispatch(matrix: Matrix, args: argparse.Namespace) -> int:
    """Hand the parsed values to the command's function in pipeline/ (imported only for its command) and print the
    lines it returns; lock and matrix print as they go. A command fails by raising PipelineError."""
    if args.command == "list":
        return say(list_output(matrix, args))
    if args.command == "render":
        from pipeline.commands import render_or_check

        return say(render_or_check(matrix, args.check))
    if args.command == "lock":
        from pipeline.commands import relock
        from pipeline.lock import check_locks

        return check_locks(matrix) if args.check else relock(matrix, args.cuda, args.torch, args.flavor)
    if args.command == "advisories":
        from pipeline.validation.advisories import refresh_snapshot

        return say(refresh_snapshot(args.from_dir, args.source, args.as_of))
    if args.command == "keygen":
        from pipeline.attest import keygen_lines

        return say(keygen_lines(args.directory, args.encrypt, args.sign_key_passphrase_file))
    if args.command == "verify":
        from pipeline.verify import Policy, verify_and_show

        policy = Policy(require_gpu=args.require_gpu, max_age_days=args.max_age, expect_line=args.expect_line)
        return say(verify_and_show(args.image_ref, args.key, policy, args.timeout, args.json))
    if args.command in ("sign", "withdraw", "attach") and args.timeout <= 0:
        raise UsageError(f"--timeout {args.timeout:g}: give a number of seconds above 0")
    if args.command == "sign":
        from pipeline.attest import key_source
        from pipeline.registry import parse_ref
        from pipeline.signing import SignRequest, sign_command

        ref = parse_ref(args.signed_ref)
        if args.children:  # a multi-arch index, from its children's prepared folders
            from pipeline.signing import index_command

            if args.prepare is None or args.report is not None or args.proof is not None:
                raise UsageError("build.py sign --children: give --prepare DIR, and no --report or --proof (the children's are)")
            return say(index_command(ref, args.children, args.prepare, args.timeout))
        if args.report is None:
            raise UsageError("build.py sign: give --report REPORT_JSON (the build's), or --children DIR DIR for an index")
        key = key_source(args.sign_key, args.sign_key_passphrase_file)
        if key is None and args.prepare is None:
            raise UsageError("build.py sign: give --sign-key PRIVATE_KEY (or set PROVEN_TORCH_SIGN_KEY), or --prepare DIR")
        request = SignRequest(ref, args.report, key, args.proof, args.require_gpu, args.run_name, args.timeout, args.prepare)
        return say(sign_command(request))
    if args.command == "attach":
        from pipeline.registry import parse_ref
        from pipeline.signing import attach_command

        return say(attach_command(parse_ref(args.signed_ref), args.prepared, args.signed, args.timeout))
    if args.command == "withdraw":
        from pipeline.registry import parse_ref
        from pipeline.withdraw import withdraw

        return say(withdraw(parse_ref(args.signed_ref), args.timeout))
    if args.command == "diff":
        from pipeline.diff import DiffRequest, diff_command

        output = "json" if args.json else "markdown" if args.markdown else "screen"
        asked = DiffRequest(
            args.image_a,
            args.image_b,
            args.key,
            args.platform,
            args.max_slowdown,
            args.advisories,
            args.max_age,
            args.timeout,
            output,
        )
        lines, status = diff_command(asked)
        say(lines)
        return status
    if args.command == "rebuild":
        from pipeline.rebuild import RebuildRequest, rebuild

        lines, status = rebuild(
            RebuildRequest(args.image_ref, tuple(args.key), args.ca_cert, args.source, args.timeout, args.verbose, args.out)
        )
        say(lines)
        return status
    if args.command == "report":
        from pipeline.html_report import rebuild_index

        return say(rebuild_index(args.report_dir))
    if args.command == "matrix":
        from pipeline.all_lines import run_and_summarize
        from pipeline.request import for_matrix

        return run_and_summarize(for_matrix(matrix, args), args.line, args.keep)
    from pipeline.line import build_line
    from pipeline.request import from_cli

    return say(build_line(from_cli(matrix, args)))


def say(lines: list[str]) -> int:
    """Print the command's lines; 0, its exit status."""
    for line in lines:
        print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(sys.argv[1:] if argv is None else list(argv))
    except cli.UsageError as err:
        print(f"{err.command or 'build.py'}: {err} (see --help)", file=sys.stderr)
        return err.exit_code
    try:
        return dispatch(load_matrix(args.matrix), args)
    except PipelineError as err:
        print(f"build.py: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("build.py: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # a bug, or a host venv that is missing: one line, the traceback on request
        if isinstance(err, ModuleNotFoundError) and (err.name or "").split(".")[0] not in OWN_PACKAGES:
            print(
                f"build.py {args.command}: needs the host venv (no module {err.name!r} in {sys.executable}): run `make image` "
                f"(it creates .venv), then `.venv/bin/python build.py {args.command} ...`",
                file=sys.stderr,
            )
            return UsageError.exit_code
        if args.debug:
            traceback.print_exc()
        print(f"build.py: unexpected error: {type(err).__name__}: {err} (rerun with --debug and report it)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
