"""The gate: run the GRPO training (here, or in N ranks), reload the saved policy and
generate, then judge and write what the image's report reads.

Outputs in cfg.out_dir: result.json (always, also when the gate fails), reward_curve.png
(when matplotlib is installed), libraries.log (what transformers logged in the gate's
process, kept off stderr), policy/ (the trained model and tokenizer, from
save_pretrained) and ranks/ (with --processes N: the launch log, the config and one
result per rank).

With --processes N the training runs in N ranks and the reward is judged on rank 0's
record of it. On a host with fewer GPUs than N (say one GPU, --processes 2, --device
auto) the reward is judged on a one-process GPU run and the N-rank check runs on the CPU
with gloo in ranks-cpu/ (its own policy and ranks/); result.json's ranks.device says which.
That path, like every GPU path here, has not been run yet.

Verdict, in this order: the multi-process run failed or its ranks' weights differ, or the
policy did not save/reload/generate -> PolicyError/RanksError (exit 4); the mean reward of
the last `window` steps exceeds the first window's by less than `min_gain` -> NoRiseError
(exit 3); else passed.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import time
from importlib import metadata
from pathlib import Path

from common.cli import write_json
from rlhf_bench import grpo, ranks
from rlhf_bench.errors import NoRiseError, RanksError, RLHFBenchError

PACKAGES = ("torch", "transformers", "trl", "accelerate", "peft", "datasets", "tokenizers")


def versions() -> dict:
    """Versions of the libraries the rlhf flavor pins (package metadata, no imports)."""
    out = {"python": platform.python_version()}
    for pkg in PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def run_gate(cfg: grpo.RunConfig) -> dict:
    """Train, reload, judge; write result.json and reward_curve.png. Returns the result
    when the gate passed, raises the failure's RLHFBenchError (after writing) otherwise."""
    started = time.perf_counter()
    device = grpo.resolve_device(cfg.device)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").unlink(missing_ok=True)
    grpo.check_offline()
    grpo.quiet_progress_bars(not cfg.progress)
    grpo.library_log_to(out / "libraries.log")

    rank_device = ranks.rank_device(cfg, device)
    try:
        if cfg.processes == 1:
            run = grpo.train(cfg, device)
            run["ranks"] = None
        elif rank_device == device:
            run = ranks.launch(cfg, device)
        else:  # fewer GPUs than ranks: the reward on the GPU in this process, the ranks on the CPU
            run = grpo.train(cfg, device)
            cpu_ranks = dataclasses.replace(cfg, out_dir=str(out / "ranks-cpu"))
            run["ranks"] = ranks.launch(cpu_ranks, rank_device)["ranks"]
    except RLHFBenchError as exc:  # nothing to judge: say why in result.json, then fail
        write_json(
            out / "result.json",
            {
                "passed": False,
                "failure": str(exc),
                "exit_code": exc.exit_code,
                "device": device,
                "processes": cfg.processes,
                "versions": versions(),
                "args": dataclasses.asdict(cfg),
            },
            sort_keys=True,
        )
        raise

    failure: RLHFBenchError | None = None
    sample = None
    if run["ranks"] is not None and not run["ranks"]["identical"]:
        failure = RanksError(
            f"the {cfg.processes} ranks ended with different weights (sha256 {', '.join(d[:12] for d in run['ranks']['digests'])}); "
            "gradients were not averaged identically across ranks"
        )
    try:
        sample = grpo.reload_and_generate(out / "policy", device, seed=cfg.seed)
    except RLHFBenchError as exc:
        failure = failure or exc

    rewards = run["rewards"]
    if len(rewards) < 2 * cfg.window or not grpo.is_finite(rewards):
        failure = failure or RLHFBenchError(
            f"training logged {len(rewards)} mean rewards for {cfg.steps} steps ({rewards[:3]}...); "
            f"the gate needs {2 * cfg.window} finite ones"
        )
        first = last = gain = None
    else:
        first, last, gain = grpo.window_means(rewards, cfg.window)
        if failure is None and gain < cfg.min_gain:
            failure = NoRiseError(
                f"the mean reward rose by {gain:.3f} over {len(rewards)} steps, below the gate's {cfg.min_gain:g} "
                f"(first {cfg.window} steps {first:.3f}, last {cfg.window} {last:.3f}; learning rate {cfg.learning_rate:g}, "
                f"seed {cfg.seed}, {device}); see {out / 'reward_curve.png'}"
            )

    result = {
        "passed": failure is None,
        "failure": None if failure is None else str(failure),
        "exit_code": 0 if failure is None else failure.exit_code,
        "algorithm": "GRPO (trl.GRPOTrainer, beta 0)",
        "ppo": f"not run: TRL {metadata.version('trl')} has no PPOTrainer",
        "rewards": rewards,
        "window": cfg.window,
        "first_window_mean": first,
        "last_window_mean": last,
        "gain": gain,
        "min_gain": cfg.min_gain,
        "steps": len(rewards),
        "seconds": run["seconds"],
        "wall_seconds": time.perf_counter() - started,
        "device": device,
        "dtype": grpo.dtype_name(device),
        "processes": cfg.processes,
        "ranks": run["ranks"],
        "digest": run["digest"],
        "policy_dir": str(out / "policy"),
        "sample": sample,
        "task": {
            "reward": f"fraction of {grpo.TARGET_CHAR!r} in the completion",
            "vocab_size": len(grpo.SPECIAL_TOKENS) + len(grpo.ALPHABET),
            "num_generations": grpo.NUM_GENERATIONS,
            "batch_size": grpo.BATCH_SIZE,
            "max_completion_length": grpo.MAX_COMPLETION_LENGTH,
        },
        "offline": {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")},
        "versions": versions(),
        "args": dataclasses.asdict(cfg),
        "warnings": run.get("warnings", []),
        "library_log": str(out / "libraries.log"),
    }
    result["plot"] = plot_reward_curve(out / "reward_curve.png", rewards, cfg, first, device)
    write_json(out / "result.json", result, sort_keys=True)
    if failure is not None:
        raise failure
    return result


def plot_reward_curve(path: Path, rewards: list[float], cfg, first: float | None, device: str) -> str | None:
    """Draw the per-step mean reward, its running mean and the gate's line; the file name,
    or a note when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return "not drawn: matplotlib is not installed"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = list(range(1, len(rewards) + 1))
    running = [
        sum(rewards[max(0, i - cfg.window + 1) : i + 1]) / len(rewards[max(0, i - cfg.window + 1) : i + 1])
        for i in range(len(rewards))
    ]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    ax.plot(steps, rewards, ".", color="tab:blue", alpha=0.5, label="mean reward of the step's completions")
    ax.plot(steps, running, color="tab:orange", lw=2, label=f"mean of the last {cfg.window} steps")
    if first is not None:
        ax.axhline(
            first + cfg.min_gain,
            color="tab:green",
            ls="--",
            lw=1,
            label=f"gate: first {cfg.window} steps' mean + {cfg.min_gain:g}",
        )
    ax.set_xlabel("GRPO step")
    ax.set_ylabel(f"reward (fraction of {grpo.TARGET_CHAR!r})")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(
        f"GRPO, tiny Llama ({device}, {grpo.dtype_name(device)}, {cfg.processes} process(es), seed {cfg.seed}, lr {cfg.learning_rate:g})"
    )
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return path.name
