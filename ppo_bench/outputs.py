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


def run_bound(args: Args) -> str:
    """What ends the run, in the words its progress uses."""
    if args.time_limit:
        return f"for {args.time_limit:g} s (--time-limit: it stops after the iteration in which that time has passed)"
    return f"up to {args.total_timesteps:,} steps" + (" or the target" if args.stop_at_target else "")


def stopped_by(
    args: Args, stop: bool, sliced: bool, timed_out: bool, iteration: int, num_iterations: int, global_batch: int
) -> str:
    """Why the loop ended, in words (result.json's `stopped_by`). A run trains whole rollouts of `global_batch`
    steps, so --total-timesteps that is no multiple of it ends below it, and says so."""
    if stop:
        return f"the target {args.target_return:g} was reached"
    if timed_out:
        return f"the time limit ({args.time_limit:g} s) passed during its last iteration"
    if sliced:
        return f"--stop-after-iterations {args.stop_after_iterations}"
    if iteration < num_iterations:
        return "stopped"
    done = num_iterations * global_batch
    if done == args.total_timesteps:
        return f"all {done:,} steps (--total-timesteps) done"
    return (
        f"all {num_iterations:,} iteration{'s' if num_iterations != 1 else ''} done: {done:,} steps, --total-timesteps {args.total_timesteps:,} "
        f"in whole rollouts of {global_batch:,} steps"
    )


class Progress:
    """What a run shows while it trains: a tqdm bar when stdout is a terminal and `bar` is allowed;
    otherwise compact lines, each flushed at once, whatever stdout is (a pipe, `| tee`, docker
    logs): one every `interval` seconds of wall time, also inside a long iteration (the rollout
    and the update `tick`), and one when the run stops. A run bounded by --time-limit shows its
    seconds against the limit, never a step total it cannot know. `quiet` prints nothing (the other
    ranks of a torchrun job). `clock` is the run's start (time.perf_counter()), `offset` the wall
    seconds of the run it resumes."""

    def __init__(
        self,
        args: Args,
        initial: int,
        clock: float,
        offset: float = 0.0,
        quiet: bool = False,
        prefix: str = "ppo_bench",
    ):
        self.total = None if args.time_limit else args.total_timesteps
        self.time_limit, self.prefix, self.interval = args.time_limit, prefix, args.progress_interval
        self.clock, self.offset = clock, offset
        self.started, self.initial = time.perf_counter(), initial
        self.next_print = time.monotonic() + self.interval - (time.perf_counter() - clock)  # `interval` after the first line
        self.step, self.mean_return = initial, None
        self.bar = None
        if args.progress and not quiet and sys.stdout.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, initial=initial, unit="step", unit_scale=True, dynamic_ncols=True)
        self.lines = not quiet and self.bar is None

    def elapsed(self) -> float:
        return self.offset + time.perf_counter() - self.clock

    def sps(self) -> float:
        return (self.step - self.initial) / max(time.perf_counter() - self.started, 1e-9)

    def line(self) -> str:
        ret = "n/a" if self.mean_return is None else f"{self.mean_return:.1f}"
        if self.total is None:
            return (
                f"{self.prefix}: step {self.step:,} | {self.elapsed():.1f}s of {self.time_limit:g}s (time limit) | "
                f"mean return {ret} | {self.sps():,.0f} steps/s"
            )
        pct = 100.0 * self.step / max(self.total, 1)
        return (
            f"{self.prefix}: step {self.step:,}/{self.total:,} ({pct:.0f}%) | mean return {ret} | "
            f"{self.sps():,.0f} steps/s | {self.elapsed():.1f}s"
        )

    def tick(self, step: int) -> None:
        """Within an iteration: a line when one is due."""
        if self.bar is not None:
            self.bar.update(step - self.step)
        self.step = max(self.step, step)
        if self.lines and time.monotonic() >= self.next_print:
            self.next_print = time.monotonic() + self.interval
            print(self.line(), flush=True)

    def update(self, step: int, mean_return: float | None) -> None:
        """At the end of an iteration."""
        self.mean_return = mean_return
        if self.bar is not None:
            ret = "n/a" if mean_return is None else f"{mean_return:.1f}"
            self.bar.set_postfix_str(f"return {ret}, {self.sps():,.0f} sps", refresh=False)
        self.tick(step)

    def close(self, why: str) -> None:
        """The last line: where the run stopped, after how long, and why."""
        if self.bar is not None:
            self.bar.close()
        if self.lines:
            print(f"{self.line()} | stopped: {why}", flush=True)
