"""The multi-process run: the gate's process launches `accelerate launch` with N ranks,
each rank runs the same `grpo.train()`, and the gate compares the ranks' final weights.

    orchestrator (the gate)                     accelerate launch, N ranks
    launch(cfg, device) ── writes ranks/config.json ──> python -m rlhf_bench.ranks CONFIG
                         <── ranks/rank<i>.json ──────  train(); digest of the final state_dict
    digests equal?  (rank 0 also saved the policy)

The ranks split the step's batch (BATCH_SIZE // N completions each, the same global
batch as one process) and DDP averages their gradients, so after the same number of
steps every rank must hold bit-identical weights; the digests say whether they do.

On the CPU the ranks use gloo. `accelerate launch --cpu --num_processes 2` starts ONE
process on a single machine (accelerate's multi-CPU path expects mpirun), so the launch
uses accelerate's torchrun launcher (`--multi_gpu`, which only decides how processes are
started) and each rank asks for the CPU itself (GRPOConfig(use_cpu=True) -> accelerate's
MULTI_CPU state, backend gloo). On GPUs the same launcher starts one rank per GPU with
NCCL and bf16; with fewer GPUs than ranks see `rank_device`. The GPU paths have not been
run yet (no GPU where this was written).

The whole launch is bounded by cfg.timeout (the process group is killed after it), and
every rank's collectives by the same timeout (GRPOConfig.ddp_timeout). Its output goes to
ranks/launch.log; the gate's own output stays one line per event.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

from common.cli import EXIT_USAGE, write_json
from common.procs import free_port, package_env, run_bounded
from rlhf_bench.errors import ConfigError, RanksError


def launch_command(processes: int, device: str, config_path: Path, port: int) -> list[str]:
    """The `accelerate launch` argument list (no shell); every setting given, so a user's
    accelerate config file cannot change how the ranks start."""
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",  # accelerate's torchrun launcher: N processes on this machine (see the module docstring)
        "--num_processes",
        str(processes),
        "--num_machines",
        "1",
        "--machine_rank",
        "0",
        "--main_process_ip",
        "127.0.0.1",
        "--main_process_port",
        str(port),
        "--mixed_precision",
        "bf16" if device == "cuda" else "no",
        "--dynamo_backend",
        "no",
        "--gpu_ids",
        "all",
        "--module",
        "rlhf_bench.ranks",
        str(config_path),
    ]


def rank_device(cfg, device: str) -> str:
    """Where the ranks run: with the run's device when there is one GPU per rank (or on
    the CPU anyway). With fewer GPUs than --processes (NCCL cannot put two ranks on one
    GPU): --device cuda is a ConfigError; --device auto checks the ranks on the CPU with
    gloo, and the gate says so (the reward is then judged on a one-process GPU run)."""
    import torch

    if cfg.processes == 1 or device == "cpu":
        return device
    gpus = torch.cuda.device_count()
    if gpus >= cfg.processes:
        return device
    if cfg.device == "cuda":
        raise ConfigError(
            f"--device cuda --processes {cfg.processes} needs {cfg.processes} GPUs (one per rank), torch sees {gpus}; "
            "--device auto runs the ranks on the CPU instead"
        )
    return "cpu"


def launch(cfg, device: str) -> dict:
    """Run `grpo.train(cfg, device)` in cfg.processes ranks; rank 0's result plus the
    ranks' digests and whether they are identical. Raises RanksError if the launch fails,
    times out, or a rank wrote no result."""
    rdir = Path(cfg.out_dir) / "ranks"
    rdir.mkdir(parents=True, exist_ok=True)
    for old in rdir.glob("rank*.json"):
        old.unlink()
    config_path = rdir / "config.json"
    config_path.write_text(json.dumps({"cfg": dataclasses.asdict(cfg), "device": device}, indent=2) + "\n")

    cmd = launch_command(cfg.processes, device, config_path, free_port())
    env = package_env()
    if device == "cpu":
        env["OMP_NUM_THREADS"] = "1"  # N ranks on few cores; a tiny model gains nothing from threads
        env["ACCELERATE_USE_CPU"] = "true"  # also on a GPU host with --device cpu
    log_path = rdir / "launch.log"
    start = time.perf_counter()
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        # --progress: the ranks' output on this terminal; at the deadline the launcher and every rank below it are stopped
        rc = run_bounded(cmd, cfg.timeout, env=env, output=None if cfg.progress else log).returncode
    wall = time.perf_counter() - start
    if rc is None:
        raise RanksError(
            f"the {cfg.processes}-process run did not finish within {cfg.timeout:g} s and was killed "
            f"(see {log_path}; raise --timeout on a slow machine)"
        )
    if rc != 0:
        raise RanksError(f"the {cfg.processes}-process run exited with status {rc}: {_last_error(log_path)} (see {log_path})")

    results = []
    for rank in range(cfg.processes):
        path = rdir / f"rank{rank}.json"
        if not path.is_file():
            raise RanksError(f"rank {rank} of the {cfg.processes}-process run wrote no {path.name} (see {log_path})")
        results.append(json.loads(path.read_text()))
    digests = [r["digest"] for r in results]
    run = dict(results[0])
    run["ranks"] = {
        "world_size": results[0]["world_size"],
        "backend": results[0]["backend"],
        "digests": digests,
        "identical": len(set(digests)) == 1,
        "device": device,
        "launch_seconds": wall,
        "command": cmd,
        "log": str(log_path),
    }
    if run["ranks"]["world_size"] != cfg.processes:
        raise RanksError(
            f"accelerate launch asked for {cfg.processes} processes, but the ranks saw a world of "
            f"{run['ranks']['world_size']} (see {log_path})"
        )
    return run


def _last_error(log_path: Path) -> str:
    """The last line of the log that looks like an error, for the one-line message."""
    lines = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    for marker in ("rlhf_bench: error:", "Error"):
        for ln in reversed(lines):
            if marker in ln:
                return ln.removeprefix("rlhf_bench: error: ")[:300]
    return lines[-1][:300] if lines else "no output"


def rank_main(config_path: str) -> int:
    """One rank: train, write ranks/rank<i>.json (digest, and on rank 0 the rewards)."""
    from rlhf_bench.grpo import RunConfig, train

    spec = json.loads(Path(config_path).read_text())
    cfg = RunConfig(**spec["cfg"])
    run = train(cfg, spec["device"])
    write_json(Path(cfg.out_dir) / "ranks" / f"rank{run['rank']}.json", run)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m rlhf_bench.ranks CONFIG_JSON (started by `python -m rlhf_bench --processes N`)", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    try:
        sys.exit(rank_main(sys.argv[1]))
    except Exception as exc:
        print(f"rlhf_bench: error: rank {os.environ.get('RANK', '?')}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        raise
