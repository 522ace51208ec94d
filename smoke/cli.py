"""python -m smoke [--expect '<json>'|@FILE | --as-installed] [--require-gpu] [--json-out PATH] [--only a,b]

With no --expect, the image's own spec (/opt/proven-torch/expect.json, made from
the variant matrix at build time) says what to expect.
Exit status: 0 every required check passed, 1 a check failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from common.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, OneLineParser, UsageError, write_json
from smoke import checks, rules
from smoke.expect import expect_from_facts, load_expect, load_spec


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = OneLineParser(prog="python -m smoke", description="Validate a proven-torch image against its pins.")
    add_expect_arguments(parser)
    parser.add_argument("--json-out", type=Path, help="write the full result as JSON here")
    parser.add_argument("--only", help=f"comma-separated subset of: {','.join(checks.NAMES)}")
    args = parser.parse_args(argv)
    if args.only is not None:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in checks.NAMES]
        if unknown or not wanted:
            raise UsageError(
                f"--only: unknown check(s) {','.join(unknown) or '(none given)'}; choose from {','.join(checks.NAMES)}"
            )
        args.only = wanted
    if args.json_out is not None:
        try:
            args.json_out.parent.mkdir(parents=True, exist_ok=True)
            with open(args.json_out, "a"):
                pass
        except OSError as err:
            raise UsageError(f"--json-out {args.json_out}: cannot write there ({err.strerror or err})") from None
    return args


def add_expect_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that say what to expect and whether a GPU is required (smoke and proof share them)."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--expect", help="expectations as JSON, or @FILE holding them (default: the image's own, /opt/proven-torch/expect.json)"
    )
    source.add_argument(
        "--as-installed",
        action="store_true",
        help="expect what is installed (versions as found, NVIDIA's minimum driver for its CUDA line): "
        "for a bare host with its own torch, not for an image",
    )
    parser.add_argument("--require-gpu", action="store_true", help="GPU checks that cannot run fail instead of skip")


def resolve_expect(args: argparse.Namespace, spec: dict | None = None) -> dict:
    """The expectations the arguments ask for: --expect, --as-installed, else the spec's
    (`spec`, or the image's own); UsageError when there are none."""
    if args.expect is not None:
        return load_expect(args.expect)
    if args.as_installed:
        import torch

        from smoke import facts as facts_mod

        return expect_from_facts(facts_mod.collect(torch), variant="as installed")
    return (spec or load_spec())["expect"]


def _row(name: str, status: str, seconds: str, detail: str) -> str:
    return f"{name:<12} {status:<5} {seconds:>7}  {detail}"


def facts_lines(facts: dict, expect: dict, require_gpu: bool) -> list[str]:
    gpus = ", ".join(f"{g['name']} (sm_{g['capability'].replace('.', '')}, {g['memory_gb']} GB)" for g in facts["gpus"]) or "none"
    return [
        f"proven-torch smoke: variant {expect.get('variant') or '?'}, require_gpu={str(require_gpu).lower()}",
        f"  torch {facts['torch']}  CUDA {facts['cuda']}  cuDNN {rules.cudnn_str(facts['cudnn'])}  NCCL {facts['nccl']}  "
        f"Python {facts['python']}",
        f"  torchvision {facts['torchvision']}  torchaudio {facts['torchaudio']}",
        f"  GPUs: {gpus}  driver: {facts['driver'] or 'none'}  /dev/shm: {rules.human_bytes(facts['shm_bytes'])}",
    ]


def run_checks(
    ctx: checks.Context,
    selected: list[str] | None,
    emit: Callable[[dict], None] = lambda record: None,
) -> list[dict]:
    """Run the selected checks in order; call emit(record) as each finishes."""
    records = []
    for name, function, gpu_check in checks.CHECKS:
        if selected is not None and name not in selected:
            continue
        start = time.monotonic()
        try:
            outcome = function(ctx)
        except Exception as err:  # a check that crashes is a failed check, with the reason
            outcome = checks.failed(f"{type(err).__name__}: {err}".strip())
        record = {
            "name": name,
            "status": outcome.status,
            "detail": outcome.detail,
            "seconds": round(time.monotonic() - start, 2),
            # a GPU check must pass when a GPU is required or usable; every other check always
            "required": (ctx.gpu_needed or ctx.cuda_ok) if gpu_check else True,
        }
        records.append(record)
        emit(record)
    return records


def verdict(records: list[dict]) -> bool:
    """OK when nothing failed and no required check was skipped."""
    return not failed_checks(records)


def failed_checks(records: list[dict]) -> list[str]:
    """The checks that failed, or were skipped though required."""
    return [r["name"] for r in records if r["status"] == "fail" or (r["status"] == "skip" and r["required"])]


def summary_line(records: list[dict], ok: bool, seconds: float) -> str:
    counts = {s: sum(r["status"] == s for r in records) for s in ("pass", "fail", "skip")}
    line = f"smoke: {'OK' if ok else 'FAILED'} - {counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped in {seconds:.1f} s"
    failed = failed_checks(records)
    if failed:
        line += f" (failed: {', '.join(failed)})"
    elif counts["skip"]:
        line += " (GPU checks skipped: no GPU; pass --require-gpu to require one)"
    return line


def run_suite(expect: dict, require_gpu: bool, out: TextIO, json_out: Path | None = None, only: list[str] | None = None) -> dict:
    """Run the checks, printing the facts, one row per check as it ends, and the summary.

    Returns the result (also written to `json_out` after every check, so a crash
    leaves the partial result behind with ok: false).
    """
    started = time.monotonic()
    import torch

    from smoke import facts as facts_mod

    facts = facts_mod.collect(torch)
    ctx = checks.Context(expect=expect, require_gpu=require_gpu, facts=facts)
    payload = {"ok": False, "complete": False, "require_gpu": require_gpu, "expect": expect, "facts": facts, "checks": []}

    for line in facts_lines(facts, expect, require_gpu):
        print(line, file=out, flush=True)
    print(_row("CHECK", "STATUS", "SECONDS", "DETAIL"), file=out, flush=True)

    def emit(record: dict) -> None:
        print(_row(record["name"], record["status"].upper(), f"{record['seconds']:.1f}", record["detail"]), file=out, flush=True)
        payload["checks"].append(record)
        if json_out:
            write_json(json_out, payload)

    records = run_checks(ctx, only, emit)
    ok = verdict(records)
    payload.update(ok=ok, complete=True, seconds=round(time.monotonic() - started, 1))
    if json_out:
        write_json(json_out, payload)
    print(summary_line(records, ok, time.monotonic() - started), file=out, flush=True)
    return payload


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        args = parse_args(argv)
        expect = resolve_expect(args)
    except UsageError as err:
        print(f"smoke: error: {err}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    payload = run_suite(expect, args.require_gpu, out, args.json_out, args.only)
    return EXIT_OK if payload["ok"] else EXIT_FAILED
