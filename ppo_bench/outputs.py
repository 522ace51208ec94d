"""What a run leaves behind: result.json, learning_curve.png and TensorBoard events (the
files written whole), and the progress display. Checkpoints: ppo_bench/checkpoint.py."""

from __future__ import annotations

import dataclasses
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

import torch

from common.cli import atomic_write, write_json
from ppo_bench.checkpoint import RunState
from ppo_bench.config import Args

try:  # imported up front: slow, and not part of the timed run
    from torch.utils.tensorboard import SummaryWriter
except ImportError:  # a bare host without tensorboard (the image has it): no event files
    SummaryWriter = None


def result_record(
    args: Args, state: RunState, iteration: int, num_iterations: int, world_size: int, device, resumed: bool
) -> dict:
    """result.json: what the run reached, how fast, on what."""
    window, steps, timing, reached = state.ep_returns[-args.target_window :], state.global_step, state.timing, state.reached
    return {
        "solved": reached["steps_to_target"] is not None,
        "target_return": args.target_return,
        "target_window": args.target_window,
        "final_mean_return": sum(window) / len(window) if window else None,
        "episodes": len(state.ep_returns),
        **reached,
        "wall_seconds": timing["wall"],
        "cpu_seconds": timing["cpu"],
        "sps_end_to_end": steps / max(timing["wall"], 1e-9),
        "sps_rollout": steps / max(timing["rollout"], 1e-9),
        "sps_update": steps / max(timing["update"], 1e-9),
        "total_env_steps": steps,
        "iterations": iteration,
        "finished": iteration >= num_iterations or reached["steps_to_target"] is not None,
        "seed": args.seed,
        "backend": args.backend,
        "env_id": args.env_id,
        "num_envs": args.num_envs,
        "num_envs_total": args.num_envs * world_size,
        "world_size": world_size,
        "torch_threads": torch.get_num_threads(),
        "resumed": resumed,
        **device_facts(device),
        "versions": versions(),
        "args": dataclasses.asdict(args),
    }


def device_facts(device: torch.device) -> dict:
    on_gpu = device.type == "cuda"
    return {
        "device": str(device),
        "gpu_name": torch.cuda.get_device_name(device) if on_gpu else None,
        "gpu_max_memory_allocated_mib": torch.cuda.max_memory_allocated(device) / 2**20 if on_gpu else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
    }


def versions() -> dict:
    """Versions of what the run used (read from package metadata, no imports)."""
    out = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda}
    for pkg in ("gymnasium", "ale-py", "numpy", "tensorboard", "matplotlib"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


class NoWriter:
    """Stands in for SummaryWriter where tensorboard is not installed."""

    def add_scalar(self, *args, **kwargs) -> None:
        pass

    add_text = add_scalar

    def close(self) -> None:
        pass


def make_writer(out_dir: Path, purge_step: int | None):
    if SummaryWriter is None:
        print("ppo_bench: tensorboard is not installed: no TensorBoard events are written", flush=True)
        return NoWriter()
    return SummaryWriter(log_dir=str(out_dir), purge_step=purge_step)


def open_writer(out_dir: Path, args, resumed_at: int | None):
    """TensorBoard writer of rank 0; a new run records its hyperparameters, a resumed one drops events past its checkpoint."""
    out_dir.mkdir(parents=True, exist_ok=True)
    writer = make_writer(out_dir, purge_step=resumed_at)
    if resumed_at is None:
        table = "\n".join(f"|{k}|{v}|" for k, v in dataclasses.asdict(args).items())
        writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + table)
    return writer


def log_iteration(writer, step: int, lr: float, mean_recent, finished: list, losses, returns, values, sps: float) -> None:
    """One iteration's TensorBoard scalars (CleanRL's names): `finished` the episodes that ended
    in it (ppo.Episode), `losses` the update's means (ppo.LossStats)."""
    var_y = returns.var()
    explained_var = (1 - (returns - values).var() / var_y).item() if var_y > 0 else float("nan")
    writer.add_scalar("charts/learning_rate", lr, step)
    if mean_recent is not None:
        writer.add_scalar("charts/episodic_return", mean_recent, step)
    if finished:
        writer.add_scalar("charts/episodic_return_iteration", sum(e.ret for e in finished) / len(finished), step)
        writer.add_scalar("charts/episodic_length", sum(e.length for e in finished) / len(finished), step)
    for name, value in losses._asdict().items():
        writer.add_scalar(f"losses/{name}", value, step)
    writer.add_scalar("losses/explained_variance", explained_var, step)
    writer.add_scalar("charts/SPS", sps, step)


def finish(writer, out_dir: Path, args, ep_steps: list[int], ep_returns: list[float], reached: dict, result: dict) -> None:
    """Rank 0's last outputs: close TensorBoard, draw the learning curve, write result.json."""
    writer.close()
    title = f"PPO {args.env_id} ({args.backend} backend, {result['device']}, seed {args.seed})"
    plot_learning_curve(
        out_dir / "learning_curve.png",
        ep_steps,
        ep_returns,
        args.target_window,
        args.target_return,
        reached["steps_to_target"],
        title=title,
    )
    write_json(out_dir / "result.json", result, sort_keys=True)


def rolling_mean(values: list[float], window: int) -> list[float]:
    """Mean of the last `window` values at each position (fewer at the start)."""
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def plot_learning_curve(
    path: Path, steps: list[int], returns: list[float], window: int, target: float | None, steps_to_target: int | None, title: str
) -> None:
    try:
        import matplotlib
    except ImportError:  # a bare host without matplotlib (the image has it)
        print(f"ppo_bench: matplotlib is not installed: {path.name} is not drawn", flush=True)
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    if steps:
        ax.scatter(steps, returns, s=2, alpha=0.25, color="tab:blue", label="episode return")
        ax.plot(steps, rolling_mean(returns, window), color="tab:orange", lw=2, label=f"mean of last {window} episodes")
    if target is not None:
        ax.axhline(target, color="tab:green", ls="--", lw=1, label=f"target {target:g}")
    if steps_to_target is not None:
        ax.axvline(steps_to_target, color="tab:red", ls=":", lw=1, label=f"target reached at {steps_to_target:,}")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episodic return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # a run too short to finish an episode has no lines
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    atomic_write(path, lambda f: fig.savefig(f, format="png"))
    plt.close(fig)


class Progress:
    """A tqdm bar when stdout is a terminal and `bar` is allowed; otherwise one compact
    line every `interval` seconds (streamed through docker logs, CI), flushed at once.
    `quiet` prints nothing (the other ranks of a torchrun job)."""

    def __init__(self, total: int, initial: int, bar: bool, interval: float, quiet: bool = False, prefix: str = "ppo_bench"):
        self.total, self.prefix, self.interval = total, prefix, interval
        self.bar = None
        self.next_print = time.monotonic() + interval
        self.last_step = initial
        if bar and not quiet and sys.stdout.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, unit="step", unit_scale=True, dynamic_ncols=True)
        self.lines = not quiet and self.bar is None

    def update(self, step: int, mean_return: float | None, sps: float, elapsed: float) -> None:
        ret = "n/a" if mean_return is None else f"{mean_return:.1f}"
        if self.bar is not None:
            self.bar.update(step - self.last_step)
            self.bar.set_postfix_str(f"return {ret}, {sps:,.0f} sps", refresh=False)
        elif self.lines and time.monotonic() >= self.next_print:
            self.next_print = time.monotonic() + self.interval
            pct = 100.0 * step / max(self.total, 1)
            print(
                f"{self.prefix}: step {step:,}/{self.total:,} ({pct:.0f}%) | mean return {ret} | "
                f"{sps:,.0f} steps/s | {elapsed:.1f}s",
                flush=True,
            )
        self.last_step = step

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
