"""Checkpoints: what they hold (weights, optimizer, RNG and environment states, the run so
far), writing and reading them, and where a run (or a restarted torchrun job) resumes."""

from __future__ import annotations

import dataclasses
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from common.cli import atomic_write
from ppo_bench.config import RUNTIME_ONLY_FIELDS, Args
from ppo_bench.distributed import Collectives
from ppo_bench.errors import ConfigError


@dataclass
class RunState:
    """What the run has done so far; a checkpoint carries it, --resume restores it."""

    start_iteration: int = 1
    global_step: int = 0
    ep_steps: list[int] = field(default_factory=list)
    ep_returns: list[float] = field(default_factory=list)
    ep_lengths: list[int] = field(default_factory=list)
    update_epochs: list[int] = field(default_factory=list)  # epochs each update ran (early stopping ends some sooner)
    timing: dict = field(default_factory=lambda: {"rollout": 0.0, "update": 0.0, "wall": 0.0, "cpu": 0.0})
    reached: dict = field(
        default_factory=lambda: {"steps_to_target": None, "seconds_to_target": None, "cpu_seconds_to_target": None}
    )


def record(args: Args, state: RunState, iteration: int, agent, optimizer, scaler, envs, next_obs: torch.Tensor, device) -> dict:
    """What a checkpoint holds: enough to continue exactly where the run is (RNG and environments included)."""
    return {
        "format": 1,
        "args": dataclasses.asdict(args),
        "iteration": iteration,
        "global_step": state.global_step,
        "agent": agent.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict() if scaler is not None else None,
        "envs": envs.state_dict(),
        "next_obs": next_obs.cpu(),
        "rng": rng_state(device),
        "episodes": {"steps": state.ep_steps, "returns": state.ep_returns, "lengths": state.ep_lengths},
        "timing": state.timing,
        "reached": state.reached,
        "update_epochs": state.update_epochs,
        "device": str(device),  # which device this rank ran on (each rank its own GPU)
        "loss_scale": scaler.get_scale() if scaler is not None else None,
    }


def restore(ckpt: dict, agent, optimizer, scaler, envs, next_obs: torch.Tensor, device: torch.device) -> RunState:
    """Put a checkpoint back into the run's objects (and the rollout's next observation); the run state it carried."""
    agent.load_state_dict(ckpt["agent"])
    optimizer.load_state_dict(ckpt["optimizer"])
    if scaler is not None:
        scaler.load_state_dict(ckpt["scaler"])
    envs.load_state_dict(ckpt["envs"])
    next_obs.copy_(ckpt["next_obs"])
    set_rng_state(ckpt["rng"], device)
    episodes = ckpt["episodes"]
    return RunState(
        start_iteration=ckpt["iteration"] + 1,
        global_step=ckpt["global_step"],
        ep_steps=episodes["steps"],
        ep_returns=episodes["returns"],
        ep_lengths=episodes["lengths"],
        update_epochs=ckpt.get("update_epochs", []),
        timing=ckpt["timing"],
        reached=ckpt["reached"],
    )


def rng_state(device: torch.device) -> dict:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)


def save(path: Path, ckpt: dict, keep_previous: bool) -> None:
    """Write the checkpoint whole; with `keep_previous` the one before stays beside it (`previous`):
    a rank that died mid-save may lack the newest, and the ranks resume from one they all hold."""
    if keep_previous and path.exists():
        os.replace(path, previous(path))
    atomic_write(path, lambda f: torch.save(ckpt, f))


def load(path: Path) -> dict:
    # weights_only=False: the checkpoint holds RNG states and pickled environments,
    # and it is a file this program wrote itself.
    return torch.load(path, map_location="cpu", weights_only=False)


def previous(path: Path) -> Path:
    return path.with_suffix(".prev.pt")


def resume_point(args: Args, comms: Collectives, ckpt_path: Path) -> dict | None:
    """The checkpoint this run continues from, or None for a fresh start.

    --resume asks for it. A torchrun restart (--max-restarts; torchrun sets
    TORCHELASTIC_RESTART_COUNT) implies it where checkpoints exist, so a job
    whose rank crashed continues from its last checkpoint instead of step 0.
    Several ranks agree first: each offers the iterations its checkpoints hold
    (the newest and the one before it), and every rank continues from the newest
    iteration all of them have. A node whose rank number changed in the new
    rendezvous takes the checkpoint it has (weights and optimizer are the same
    on every rank; only the environments' states are another rank's).
    """
    # Each node's agent counts its own restarts (a node restarted for another's failure may say 0),
    # so the ranks decide together whether this is a restart.
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    restart = comms.any(restart, "whether any rank was restarted (all_reduce)")
    if not (args.resume or restart):
        return None
    held = {}  # iteration -> checkpoint
    candidates = [ckpt_path, previous(ckpt_path)]
    if comms.world_size > 1 and not ckpt_path.exists():
        candidates = sorted(ckpt_path.parent.glob("checkpoint-rank*.pt"))[:1]
        candidates += [previous(path) for path in candidates]
    for path in candidates[: 1 if comms.world_size == 1 else 2]:
        if path.exists():
            ckpt = load(path)
            held[ckpt["iteration"]] = ckpt
    offered = comms.gather(sorted(held), "the checkpoint iterations each rank holds (all_gather_object)")
    common = set(offered[0]).intersection(*offered[1:])
    if not common:
        if args.resume and comms.world_size == 1:
            raise ConfigError(f"--resume: no checkpoint at {ckpt_path}; start without --resume")
        if args.resume:
            where = "; ".join(f"rank {r}: {its or 'none'}" for r, its in enumerate(offered))
            raise ConfigError(
                f"--resume: no checkpoint iteration that every rank holds in its out_dir ({where}); start without --resume"
            )
        if comms.rank == 0:
            print("ppo_bench: after a torchrun restart: no checkpoint every rank holds; starting from step 0", flush=True)
        return None
    ckpt = held[max(common)]
    _check_resume_args(ckpt["args"], args)
    if restart and comms.rank == 0:
        print(f"ppo_bench: after a torchrun restart, every rank resumes from iteration {ckpt['iteration']}", flush=True)
    return ckpt


def _check_resume_args(saved: dict, args: Args) -> None:
    current = dataclasses.asdict(args)
    differ = [k for k in current if k not in RUNTIME_ONLY_FIELDS and saved.get(k) != current[k]]
    if differ:
        detail = ", ".join(f"{k}: checkpoint {saved.get(k)!r} vs now {current[k]!r}" for k in differ)
        raise ConfigError(f"--resume: arguments differ from the checkpoint's ({detail}); resume with the same ones")
