"""`python -m rlhf_bench ...`: the rlhf flavor's gate, a tiny offline GRPO run that must
raise its mean reward, save the policy, reload it and generate.

The gate's defaults, and why (measured on the 2-core CPU build machine, fp32, with the
host venv's CPU torch and the rlhf flavor's pins from images/variants.toml):
* 60 GRPO steps at a constant learning rate of 3e-3, 8 completions of 8 tokens per
  step (one prompt's group), seed 0. About 1.5 s of training on one process.
* The verdict compares the mean reward of the first 10 steps with that of the last 10;
  it must rise by at least 0.3 (--min-gain). A random policy scores about 0.04 (one
  character in 31). Over seeds 0..9 the mean reward rose from 0.03-0.07 to 0.89-0.98
  (gains 0.85-0.93 in one process, 0.88-0.92 in two ranks): a margin of 0.55 over the
  worst seed. With --learning-rate 0 the gain stayed within -0.02..+0.03 (seeds 0..4),
  a tenth of the gate. Half the learning rate still gains 0.36-0.46 (seeds 0..4), so a
  device whose arithmetic learns somewhat slower (bf16 on a GPU) still passes, while a
  policy that does not learn cannot.
* --processes 1 by default: the quick run for a person. The image's validation passes
  --processes 2, which runs the same training in two ranks (the gate judges rank 0's
  rewards, which TRL averages over both ranks) and adds the identical-weights check
  (rlhf_bench/ranks.py). About 7 s for the whole gate in one process, 14 s with two.
  On a host with fewer GPUs than ranks (one GPU, --processes 2) --device auto judges the
  reward on the GPU in one process and checks the two ranks on the CPU (gloo).
The GPU path (bf16 autocast, one rank per GPU with NCCL) follows the same code but has
not been run: no GPU was available where this was written.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

from common.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, OneLineParser, UsageError

# rlhf_bench's __init__ has set offline mode: nothing below may download.
from rlhf_bench.errors import RLHFBenchError
from rlhf_bench.grpo import BATCH_SIZE, RunConfig

EPILOG = """\
exit codes:
  0  passed: the reward rose by --min-gain, the policy reloaded and generated (and with
     --processes N, every rank ended with the same weights)
  1  an unexpected error (the traceback is in OUT/traceback.txt)
  2  bad arguments, or --device cuda without a GPU (or with fewer GPUs than --processes)
  3  the mean reward did not rise by --min-gain within --steps
  4  saving the policy, reloading it or generating with it failed; or the multi-process
     run failed, timed out, or its ranks ended with different weights
Every failure prints one line "rlhf_bench: error: ..." on stderr; OUT/result.json says more.
The image's validation runs: python -m rlhf_bench --out DIR --processes 2
"""


def build_parser() -> argparse.ArgumentParser:
    d = RunConfig()
    p = OneLineParser(
        prog="python -m rlhf_bench",
        description="Tiny offline RLHF gate: a 2-layer Llama built from a config, a character tokenizer built "
        "locally, a programmatic reward (the share of 'a' in each completion), TRL's GRPOTrainer, fixed seed. "
        "Writes result.json, reward_curve.png and the trained policy (save_pretrained) to --out.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", dest="out_dir", default=d.out_dir, metavar="DIR", help=f"output folder (default: ./{d.out_dir})")
    numbers = (  # flag, type, metavar (None: argparse's own), help before the default
        ("--steps", int, None, "GRPO optimizer steps"),
        ("--learning-rate", float, "LR", "constant AdamW learning rate; 0 must fail the gate"),
        ("--seed", int, None, "seed for the model, the prompts and sampling"),
        ("--min-gain", float, "G", "the gate: last-window mean reward minus first-window mean"),
        ("--window", int, "N", "steps averaged at each end of the reward curve"),
        (
            "--processes",
            int,
            "N",
            "1: train in this process; N > 1: `accelerate launch` N ranks (gloo on the CPU, one GPU each with NCCL) and "
            "check that they end with identical weights; with fewer GPUs than N and --device auto the ranks run on the CPU",
        ),
    )
    for flag, kind, metavar, text in numbers:
        default = getattr(d, flag[2:].replace("-", "_"))
        p.add_argument(flag, type=kind, default=default, metavar=metavar, help=f"{text} (default: {default:g})")
    p.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default=d.device,
        help="auto: cuda if torch sees a GPU (bf16), else cpu (fp32) (default: auto)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=d.timeout,
        metavar="SECONDS",
        help=f"limit for the multi-process run, which is killed after it (default: {d.timeout:g})",
    )
    p.add_argument("--progress", action="store_true", help="show TRL's progress bar (and the ranks' output)")
    return p


def parse_config(argv: list[str] | None) -> RunConfig:
    """The run's settings; a bad argument is one line on stderr and exit 2, like every failure."""
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
        if ns.steps < 1 or ns.window < 1:
            raise UsageError("--steps and --window must be at least 1")
        if ns.steps < 2 * ns.window:
            raise UsageError(f"--steps {ns.steps} is fewer than two windows of --window {ns.window}")
        if ns.learning_rate < 0:
            raise UsageError("--learning-rate must be 0 or more")
        if ns.processes < 1 or BATCH_SIZE % ns.processes:
            raise UsageError(f"--processes must divide the batch of {BATCH_SIZE} completions per step (1, 2, 4 or 8)")
        if ns.timeout <= 0:
            raise UsageError("--timeout must be positive")
    except UsageError as err:
        parser.exit(EXIT_USAGE, f"rlhf_bench: error: {err} (see python -m rlhf_bench --help)\n")
    return RunConfig(**vars(ns))


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(argv)  # exits 2 on bad arguments
    from rlhf_bench.gate import run_gate

    where = "this process" if cfg.processes == 1 else f"{cfg.processes} ranks under accelerate launch"
    print(
        f"rlhf_bench: GRPO, {cfg.steps} steps, learning rate {cfg.learning_rate:g}, seed {cfg.seed}, device {cfg.device}, "
        f"{where} -> {cfg.out_dir}",
        flush=True,
    )
    try:
        r = run_gate(cfg)
    except RLHFBenchError as exc:
        print(f"rlhf_bench: error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - one line here, the traceback in a file
        path = Path(cfg.out_dir) / "traceback.txt"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(traceback.format_exc())
            where_tb = f"traceback in {path}"
        except OSError:
            where_tb = "no traceback written"
        print(f"rlhf_bench: error: unexpected {type(exc).__name__}: {exc} ({where_tb})", file=sys.stderr, flush=True)
        return EXIT_FAILED
    ranks = ""
    if r["ranks"]:
        on_cpu = " on the CPU (fewer GPUs than ranks)" if r["ranks"]["device"] != r["device"] else ""
        ranks = f", {r['ranks']['world_size']} ranks ({r['ranks']['backend']}{on_cpu}) with identical weights"
    print(
        f"rlhf_bench: PASSED: mean reward {r['first_window_mean']:.3f} -> {r['last_window_mean']:.3f} "
        f"(+{r['gain']:.3f} >= {r['min_gain']:g}) in {r['steps']} steps{ranks}; policy reloaded, generated "
        f"{r['sample']['completion']!r} after {r['sample']['prompt']!r}; {r['device']} {r['dtype']}, "
        f"training {r['seconds']:.1f} s, gate {r['wall_seconds']:.1f} s -> {Path(cfg.out_dir) / 'result.json'}",
        flush=True,
    )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
