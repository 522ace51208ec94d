"""`python -m ppo_bench ...`: the command line over `ppo_bench.ppo.train`.

Every option is a field of `ppo_bench.config.Args` (--some-field / --no-some-field
for booleans); its help is the field's docstring. Exit codes: 0 done (and solved,
with --fail-below-target), 2 bad arguments or --require-gpu without a GPU,
3 --fail-below-target and the target was not reached, 4 a collective across
torchrun ranks did not complete within --dist-timeout, 1 anything unexpected.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import os
import sys
import types
import typing
from pathlib import Path

from common.cli import EXIT_OK
from common.host import HostCondition, condition_text
from ppo_bench.errors import EXIT_BELOW_TARGET, PPOBenchError


def field_docs(cls) -> dict[str, str]:
    """Attribute docstrings (the string literal under each field), as tyro reads them."""
    try:
        tree = ast.parse(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    docs, body = {}, tree.body[0].body
    for node, nxt in zip(body, body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = nxt.value.value
    return docs


def _base_type(annotation):
    """int for `int | None`, etc."""
    if isinstance(annotation, str):
        annotation = eval(annotation, {"__builtins__": __builtins__})  # noqa: S307 - our own annotations
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return next(a for a in typing.get_args(annotation) if a is not type(None))
    return annotation


def build_parser() -> argparse.ArgumentParser:
    from ppo_bench.config import Args

    parser = argparse.ArgumentParser(
        prog="python -m ppo_bench",
        description=f"PPO benchmark that must learn ({Args.env_id} by default). Writes result.json, "
        "learning_curve.png, TensorBoard events and a checkpoint to --out-dir.",
        epilog="Exit codes: 0 ok; 2 bad arguments or --require-gpu without a GPU; "
        "3 --fail-below-target and the target return was not reached; "
        "4 a collective across torchrun ranks did not complete within --dist-timeout; 1 unexpected error.",
    )
    docs = field_docs(Args)
    for f in dataclasses.fields(Args):
        flag = "--" + f.name.replace("_", "-")
        typ = _base_type(f.type)
        help_text = docs.get(f.name, "")
        if typ is bool:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=f.default, help=help_text)
        else:
            default_txt = "" if f.default is None else f" (default: {f.default})"
            parser.add_argument(
                flag, dest=f.name, type=typ, default=f.default, metavar=typ.__name__.upper(), help=help_text + default_txt
            )
    return parser


def process_seconds() -> float | None:
    """Seconds since this process started (Python's start and the imports included), from /proc; None where unreadable."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()  # after "pid (comm)": state is field 3
        started = int(fields[22 - 3]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime, in clock ticks after boot
        return float(Path("/proc/uptime").read_text().split()[0]) - started
    except (OSError, ValueError, IndexError):
        return None


def summary_line(result: dict, out_dir: str, process: float | None) -> str:
    """The run's one-line summary. `training=` is result.json's wall_seconds: from building the environments
    to the last update (not Python's start, the imports or CUDA's); `process=` the whole process so far."""
    return (
        f"ppo_bench: solved={result['solved']} final_mean_return={_fmt(result['final_mean_return'])} "
        f"steps_to_target={result['steps_to_target']} seconds_to_target={_fmt(result['seconds_to_target'])} "
        f"env_steps={result['total_env_steps']:,} training={result['wall_seconds']:.2f}s "
        + (f"process={process:.2f}s " if process is not None else "")
        + f"sps={result['sps_end_to_end']:,.0f} device={result['device']} -> {out_dir}/result.json"
    )


def main(argv: list[str] | None = None) -> int:
    from ppo_bench.config import Args
    from ppo_bench.ppo import train

    ns = build_parser().parse_args(argv)  # exits 2 on bad arguments
    try:
        result = train(Args(**vars(ns)))
    except PPOBenchError as exc:
        print(f"ppo_bench: error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    summary = summary_line(result, ns.out_dir, process_seconds())
    if os.environ.get("RANK", "0") == "0":  # torchrun: one summary, from rank 0
        print(summary, flush=True)
        print(f"ppo_bench: host during the run: {condition_text(HostCondition.from_json(result['host']))}", flush=True)
    if ns.fail_below_target and not result["solved"] and result["finished"]:
        print(
            f"ppo_bench: FAILED: mean return over the last {result['target_window']} episodes "
            f"{_fmt(result['final_mean_return'])} never reached {result['target_return']:g} in "
            f"{result['total_env_steps']:,} steps ({result['env_id']}, {result['backend']} backend, seed "
            f"{result['seed']}, {result['device']}); see {ns.out_dir}/learning_curve.png",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_BELOW_TARGET
    return EXIT_OK


def _fmt(x) -> str:
    return "null" if x is None else f"{x:.2f}"


if __name__ == "__main__":
    sys.exit(main())
