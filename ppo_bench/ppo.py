"""PPO (clipped surrogate), top to bottom, after CleanRL's ppo.py.

Differences from CleanRL's ppo.py, each for a reason:
* environments reset in the same step that ends an episode (see envs.py), and a
  truncated episode (time limit) is bootstrapped with the value of its final
  observation instead of being treated as a failure;
* `--backend torch` keeps CartPole itself on the training device (envs.py), so the
  rollout makes no host round trip per step; the host reads back the episode
  returns once per iteration;
* sampling is Gumbel-max and log-probabilities are written out (no
  torch.distributions), so one rollout can be captured in a CUDA graph;
* `torchrun` scale-out (each rank its own environments, gradients averaged with
  one all_reduce per minibatch), checkpoints with RNG and environment states
  for an exact `--resume`, and a result.json that the image gate reads.

Entry point: `python -m ppo_bench --help` (CLI in __main__.py); `train(Args(...))`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import random
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch._dynamo  # noqa: F401  torch.optim imports it on first use (seconds); do it here, not in the timed run
import torch.nn as nn

from ppo_bench import outputs
from ppo_bench.envs import make_envs
from ppo_bench.errors import ConfigError, DistributedError, GpuRequiredError

BACKENDS = ("torch", "gymnasium")

# Algorithm settings whose best value depends on the backend. `None` in Args means
# "take it from here". The gymnasium column is CleanRL's ppo.py defaults. The
# torch column was tuned to reach CartPole's target in little CPU time on a
# 2-core CPU (docs/ppo-benchmark.md has the measurements): many more environments
# and large minibatches (few optimizer steps: each costs milliseconds of overhead
# on a CPU), a 16x learning rate held in check by early stopping on KL, no
# value clipping (with returns of order 100, clipping value updates to +-0.2
# slowed the critic) and no entropy bonus (it kept the policy from settling at 500).
BACKEND_DEFAULTS = {
    "torch": dict(
        total_timesteps=2_000_000,
        num_envs=256,
        num_steps=16,
        learning_rate=4e-3,
        num_minibatches=4,
        update_epochs=4,
        clip_vloss=False,
        ent_coef=0.0,
        target_kl=0.03,
    ),
    "gymnasium": dict(
        total_timesteps=500_000,
        num_envs=4,
        num_steps=128,
        learning_rate=2.5e-4,
        num_minibatches=4,
        update_epochs=4,
        clip_vloss=True,
        ent_coef=0.01,
        target_kl=0.0,
    ),
}


@dataclass
class Args:
    # --- experiment -----------------------------------------------------------
    exp_name: str = "ppo_bench"
    """the name of this experiment (TensorBoard text, result.json)"""
    seed: int = 1
    """seed of the experiment: network init, action sampling, environment resets"""
    torch_deterministic: bool = True
    """ask torch for deterministic kernels (cudnn.deterministic, cuBLAS workspace config)"""
    device: str = "auto"
    """'auto' (cuda when torch sees a GPU, else cpu), 'cpu' or 'cuda'"""
    require_gpu: bool = False
    """fail with exit code 2 unless torch sees a CUDA GPU"""
    threads: int = 1
    """torch CPU threads (torch.set_num_threads); 0 keeps torch's default (one per core). The networks are too small
    to gain from more, and extra threads spin against other work on a shared CPU"""

    # --- environment ----------------------------------------------------------
    backend: str = "torch"
    """'torch': CartPole-v1 batched in torch on the device; 'gymnasium': gymnasium vector envs on the host"""
    env_id: str = "CartPole-v1"
    """the id of the environment (torch backend: CartPole-v1 only; gymnasium: e.g. Pendulum-v1)"""
    num_envs: int | None = None
    """parallel environments per process (default per backend: torch 256, gymnasium 4)"""

    # --- algorithm --------------------------------------------------------------
    total_timesteps: int | None = None
    """total environment steps over all processes (default: torch 2,000,000, gymnasium 500,000)"""
    learning_rate: float | None = None
    """Adam learning rate (default: torch 4e-3, gymnasium 2.5e-4)"""
    num_steps: int | None = None
    """steps per environment per rollout (default: torch 16, gymnasium 128)"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0 over total_timesteps"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda of generalised advantage estimation"""
    num_minibatches: int | None = None
    """minibatches per epoch (default 4)"""
    update_epochs: int | None = None
    """epochs over each rollout batch (default 4)"""
    norm_adv: bool = True
    """normalise advantages per minibatch"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient (also clips the value loss)"""
    clip_vloss: bool | None = None
    """use the clipped value loss of the PPO paper (default: torch backend off, it slowed learning there; gymnasium on, as CleanRL)"""
    ent_coef: float | None = None
    """coefficient of the entropy bonus (default: torch 0.0, gymnasium 0.01 as CleanRL)"""
    vf_coef: float = 0.5
    """coefficient of the value loss"""
    max_grad_norm: float = 0.5
    """the maximum norm for gradient clipping"""
    target_kl: float | None = None
    """stop an update's epochs early when the approximate KL exceeds this; 0 = never (default: torch 0.03, gymnasium 0)"""
    bootstrap_truncation: bool = True
    """bootstrap truncated episodes (time limit) with V(final observation) instead of treating them as terminal"""
    hidden_size: int = 64
    """width of the two hidden layers of the actor and of the critic"""
    activation: str = "tanh"
    """hidden activation: 'tanh' (CleanRL) or 'relu'"""

    # --- target and outputs -------------------------------------------------------
    target_return: float | None = None
    """mean return over the last `target_window` episodes that counts as solved (default: the env's reward threshold, 475 for CartPole-v1)"""
    target_window: int = 100
    """how many of the most recent finished episodes the target mean is taken over"""
    stop_at_target: bool = False
    """stop as soon as the target is reached"""
    fail_below_target: bool = False
    """exit with code 3 if the target was not reached"""
    out_dir: str = "runs/ppo_bench"
    """where result.json, learning_curve.png, TensorBoard events and checkpoints go"""
    progress: bool = True
    """tqdm progress bar when stdout is a terminal; without it (--no-progress, or not a terminal) a compact progress line every progress_interval seconds"""
    progress_interval: float = 5.0
    """seconds between progress lines when there is no progress bar"""
    checkpoint_every: float = 60.0
    """seconds between checkpoints (one is always written at the end); 0 = only at the end"""
    resume: bool = False
    """continue the run whose checkpoint is in out_dir, exactly where it stopped"""
    stop_after_iterations: int = 0
    """stop (with a checkpoint) after this many iterations of this invocation; 0 = no limit. For time-sliced jobs"""
    dist_timeout: float = 300.0
    """torchrun jobs: seconds a collective waits for the other ranks; then the run fails with one line naming the rank and the collective"""

    # --- speed options (docs/ppo-benchmark.md says what each one is worth) --------
    cuda_graphs: bool = False
    """capture each rollout (policy + torch CartPole, num_steps steps) in one CUDA graph; cuda + torch backend only"""
    compile: bool = False
    """torch.compile the rollout step and the loss (needs a C++ compiler on CPU; compiling takes tens of seconds)"""
    amp: str = "off"
    """automatic mixed precision for the networks: 'off', 'bf16', or 'fp16' (cuda only, with GradScaler)"""
    adam: str = "auto"
    """Adam implementation: 'foreach', 'fused', or 'auto' (= fused: on CPU measurably faster here, and fewer kernels on cuda)"""


# Fields that may differ between a run and its --resume (they do not change results).
RUNTIME_ONLY_FIELDS = {
    "out_dir",
    "progress",
    "progress_interval",
    "checkpoint_every",
    "resume",
    "stop_after_iterations",
    "require_gpu",
    "fail_below_target",
    "stop_at_target",
    "dist_timeout",
}


def resolve_args(args: Args) -> Args:
    """Fill backend defaults and check that the arguments can work together."""
    if args.backend not in BACKENDS:
        raise ConfigError(f"--backend must be one of {', '.join(BACKENDS)}, not {args.backend!r}")
    filled = {k: v for k, v in BACKEND_DEFAULTS[args.backend].items() if getattr(args, k) is None}
    args = dataclasses.replace(args, **filled)
    if args.target_kl is not None and args.target_kl <= 0:
        args = dataclasses.replace(args, target_kl=None)
    if args.target_return is None:
        args = dataclasses.replace(args, target_return=_default_target(args))
    for name in ("num_envs", "num_steps", "num_minibatches", "update_epochs", "total_timesteps", "target_window"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if (args.num_envs * args.num_steps) % args.num_minibatches:
        raise ConfigError(
            f"num_envs*num_steps ({args.num_envs}*{args.num_steps}) must be divisible by "
            f"--num-minibatches ({args.num_minibatches})"
        )
    if args.device not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"--device must be auto, cpu or cuda, not {args.device!r}")
    if args.amp not in ("off", "bf16", "fp16"):
        raise ConfigError(f"--amp must be off, bf16 or fp16, not {args.amp!r}")
    if args.activation not in ACTIVATIONS:
        raise ConfigError(f"--activation must be one of {', '.join(ACTIVATIONS)}, not {args.activation!r}")
    if args.adam not in ("auto", "foreach", "fused"):
        raise ConfigError(f"--adam must be auto, foreach or fused, not {args.adam!r}")
    if args.require_gpu and args.device == "cpu":
        raise ConfigError("--require-gpu contradicts --device cpu")
    if args.cuda_graphs and args.backend != "torch":
        raise ConfigError("--cuda-graphs needs --backend torch (gymnasium envs step on the host)")
    if args.fail_below_target and args.target_return is None:
        raise ConfigError(f"--fail-below-target needs --target-return ({args.env_id} has no reward threshold)")
    return args


def _default_target(args: Args) -> float | None:
    if args.env_id == "CartPole-v1":
        return 475.0  # gymnasium's reward_threshold for CartPole-v1
    if args.backend == "gymnasium":
        import gymnasium as gym

        with contextlib.suppress(gym.error.Error):
            return gym.spec(args.env_id).reward_threshold
    return None


# =============================================================================
# The agent: separate actor and critic MLPs (64-64, tanh), CleanRL's init.
# =============================================================================


def layer_init(layer: nn.Linear, std: float = math.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


def mlp(in_dim: int, out_dim: int, out_std: float, hidden: int, activation: str) -> nn.Sequential:
    act = ACTIVATIONS[activation]
    return nn.Sequential(
        layer_init(nn.Linear(in_dim, hidden)),
        act(),
        layer_init(nn.Linear(hidden, hidden)),
        act(),
        layer_init(nn.Linear(hidden, out_dim), std=out_std),
    )


class Agent(nn.Module):
    """Categorical policy for discrete actions, diagonal Gaussian for Box actions."""

    def __init__(self, obs_dim: int, num_actions: int, continuous: bool, hidden: int = 64, activation: str = "tanh"):
        super().__init__()
        self.continuous = continuous
        self.critic = mlp(obs_dim, 1, 1.0, hidden, activation)
        self.actor = mlp(obs_dim, num_actions, 0.01, hidden, activation)
        if continuous:
            self.actor_logstd = nn.Parameter(torch.zeros(1, num_actions))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def act(self, obs: torch.Tensor):
        """Sample an action; returns (action, its log-probability, V(obs))."""
        out = self.actor(obs)
        if self.continuous:
            logstd = self.actor_logstd.expand_as(out)
            action = out + logstd.exp() * torch.randn_like(out)
            logprob = gaussian_logprob(action, out, logstd).sum(-1)
        else:
            logp = out.float().log_softmax(-1)
            # Gumbel-max trick: argmax(logp + Gumbel) = argmax(logp - log(Exponential)) is a categorical sample.
            action = (logp - torch.empty_like(logp).exponential_().log()).argmax(-1)
            logprob = logp.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        return action, logprob, self.value(obs)

    def evaluate(self, obs: torch.Tensor, action: torch.Tensor):
        """Log-probability and entropy of given actions, and V(obs)."""
        out = self.actor(obs)
        if self.continuous:
            logstd = self.actor_logstd.expand_as(out)
            logprob = gaussian_logprob(action, out, logstd).sum(-1)
            entropy = (0.5 + 0.5 * math.log(2 * math.pi) + logstd).sum(-1)
        else:
            logp = out.float().log_softmax(-1)
            logprob = logp.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
            entropy = -(logp.exp() * logp).sum(-1)
        return logprob, entropy, self.value(obs)


def gaussian_logprob(x: torch.Tensor, mean: torch.Tensor, logstd: torch.Tensor) -> torch.Tensor:
    return -((x - mean) ** 2) / (2 * torch.exp(2 * logstd)) - logstd - 0.5 * math.log(2 * math.pi)


# =============================================================================
# The pieces of the PPO update, as plain functions (the unit tests check them).
# =============================================================================


def compute_gae(rewards, values, dones, next_value, gamma: float, gae_lambda: float):
    """Generalised advantage estimation over a (num_steps, num_envs) rollout.

    `dones[t]` is 1 where the episode ended AT step t (its transition t was the
    last), so step t's successor value is masked out. Returns (advantages, returns).
    """
    num_steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    lastgaelam = torch.zeros_like(next_value)
    for t in reversed(range(num_steps)):
        nextvalues = next_value if t == num_steps - 1 else values[t + 1]
        nextnonterminal = 1.0 - dones[t]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
        advantages[t] = lastgaelam
    return advantages, advantages + values


def clipped_policy_loss(newlogprob, oldlogprob, advantages, clip_coef: float):
    """PPO's clipped surrogate (to minimise); also returns approx KL and clip fraction."""
    logratio = newlogprob - oldlogprob
    ratio = logratio.exp()
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - logratio).mean()  # http://joschu.net/blog/kl-approx.html
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean()
    return pg_loss, approx_kl, clipfrac


def clipped_value_loss(newvalue, oldvalue, returns, clip_coef: float, clip: bool = True):
    """0.5 * max(unclipped, clipped) squared error (or plain 0.5 * MSE with clip=False)."""
    v_loss_unclipped = (newvalue - returns) ** 2
    if not clip:
        return 0.5 * v_loss_unclipped.mean()
    v_clipped = oldvalue + torch.clamp(newvalue - oldvalue, -clip_coef, clip_coef)
    v_loss_clipped = (v_clipped - returns) ** 2
    return 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()


# =============================================================================
# Device, distributed setup, seeding.
# =============================================================================


def pick_device(args: Args, local_rank: int) -> torch.device:
    has_cuda = torch.cuda.is_available()
    if (args.require_gpu or args.device == "cuda") and not has_cuda:
        flag = "--require-gpu" if args.require_gpu else "--device cuda"
        raise GpuRequiredError(
            f"{flag}: torch {torch.__version__} (CUDA build {torch.version.cuda}) sees no CUDA GPU; "
            "run on a GPU host (docker run --gpus all ...) or drop the flag"
        )
    if args.device == "cpu" or (args.device == "auto" and not has_cuda):
        if args.cuda_graphs:
            raise ConfigError("--cuda-graphs needs a CUDA device (this run is on the CPU)")
        if args.amp == "fp16":
            raise ConfigError("--amp fp16 needs a CUDA device; on the CPU use --amp bf16")
        return torch.device("cpu")
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    # Bind this rank to its GPU before anything touches CUDA: NCCL stages
    # all_gather_object on the current device, and CUDA-graph capture uses its
    # current stream; left at cuda:0, every rank would share GPU 0.
    torch.cuda.set_device(device)
    return device


class Collectives:
    """The run's collectives across torchrun ranks (one rank: no-ops).

    Each is bounded by the process group's timeout (--dist-timeout). One that
    does not complete, because another rank stalled or died, raises one line
    naming this rank and the collective instead of waiting forever.
    """

    def __init__(self, device: torch.device, timeout_s: float):
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank, self.timeout_s, self.device = 0, timeout_s, device
        if self.world_size == 1:
            return
        import datetime

        import torch.distributed as dist

        self.dist = dist
        if not dist.is_initialized():
            timeout = datetime.timedelta(seconds=timeout_s)
            if device.type == "cuda":  # device_id: the communicator is bound to this rank's GPU
                dist.init_process_group("nccl", timeout=timeout, device_id=device)
            else:
                dist.init_process_group("gloo", timeout=timeout)
        self.rank = dist.get_rank()

    def _bounded(self, what: str, run):
        try:
            return run()
        except RuntimeError as err:  # gloo: "Timed out waiting ..." / "Connection closed by peer"; NCCL: DistBackendError
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            raise DistributedError(
                f"rank {self.rank} of {self.world_size}: {what} did not complete within {self.timeout_s:g} s "
                f"(another rank stalled or died): {first}"
            ) from None

    def broadcast_(self, tensor: torch.Tensor, what: str) -> None:
        if self.world_size > 1:
            self._bounded(what, lambda: self.dist.broadcast(tensor, src=0))

    def mean_(self, tensor: torch.Tensor, what: str) -> None:
        """Average `tensor` over the ranks, in place."""
        if self.world_size > 1:
            self._bounded(what, lambda: self.dist.all_reduce(tensor))
            tensor /= self.world_size

    def any(self, flag: bool, what: str) -> bool:
        """True on every rank when it is true on one (a decision all ranks must take together)."""
        if self.world_size == 1:
            return flag
        tensor = torch.tensor([int(flag)], device=self.device)
        self._bounded(what, lambda: self.dist.all_reduce(tensor, op=self.dist.ReduceOp.MAX))
        return bool(tensor.item())

    def gather(self, obj, what: str) -> list:
        if self.world_size == 1:
            return [obj]
        gathered = [None] * self.world_size
        self._bounded(what, lambda: self.dist.all_gather_object(gathered, obj))
        return gathered

    def barrier(self, what: str) -> None:
        if self.world_size > 1:
            self._bounded(what, self.dist.barrier)

    def close(self) -> None:
        if self.world_size > 1 and self.dist.is_initialized():
            self.dist.destroy_process_group()


def seed_everything(seed: int, deterministic: bool, device: torch.device) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # every device's default generator
    if device.type == "cuda":
        torch.backends.cudnn.deterministic = deterministic
        torch.backends.cudnn.benchmark = not deterministic
        if deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


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


def device_facts(device: torch.device) -> dict:
    return {
        "device": str(device),
        "gpu_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
    }


def capture_cuda_graph(fn, device: torch.device, warmup: int = 2) -> torch.cuda.CUDAGraph:
    """Warm `fn` up on a side stream of `device`, then record it into a CUDA graph
    (pytorch.org/docs/stable/notes/cuda.html#cuda-graphs)."""
    side = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.device(device), torch.cuda.graph(graph):
        fn()
    return graph


# =============================================================================
# Storage and run state: what a rollout fills, and what a checkpoint carries.
# =============================================================================


@dataclass
class Storage:
    """The rollout's tensors. Every rollout writes into these same tensors (a CUDA graph needs fixed addresses)."""

    obs: torch.Tensor
    final_obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    terms: torch.Tensor
    truncs: torch.Tensor
    ep_ret: torch.Tensor
    ep_len: torch.Tensor
    next_obs: torch.Tensor

    @classmethod
    def allocate(cls, T: int, N: int, envs, device: torch.device) -> Storage:
        shape = envs.single_observation_shape
        zeros = functools.partial(torch.zeros, device=device)
        actions = zeros((T, N, envs.num_actions)) if envs.continuous else zeros((T, N), dtype=torch.long)
        return cls(
            obs=zeros((T, N) + shape), final_obs=zeros((T, N) + shape), actions=actions, logprobs=zeros((T, N)),
            values=zeros((T, N)), rewards=zeros((T, N)), terms=zeros((T, N), dtype=torch.bool),
            truncs=zeros((T, N), dtype=torch.bool), ep_ret=zeros((T, N)), ep_len=zeros((T, N), dtype=torch.int32),
            next_obs=zeros((N,) + shape),
        )  # fmt: skip


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


def restore(ckpt: dict, agent, optimizer, scaler, envs, store: Storage, device: torch.device) -> RunState:
    """Put a checkpoint back into the run's objects; the run state it carried."""
    agent.load_state_dict(ckpt["agent"])
    optimizer.load_state_dict(ckpt["optimizer"])
    if scaler is not None:
        scaler.load_state_dict(ckpt["scaler"])
    envs.load_state_dict(ckpt["envs"])
    store.next_obs.copy_(ckpt["next_obs"])
    set_rng_state(ckpt["rng"], device)
    episodes = ckpt["episodes"]
    return RunState(
        start_iteration=ckpt["iteration"] + 1, global_step=ckpt["global_step"], ep_steps=episodes["steps"],
        ep_returns=episodes["returns"], ep_lengths=episodes["lengths"], update_epochs=ckpt.get("update_epochs", []),
        timing=ckpt["timing"], reached=ckpt["reached"],
    )  # fmt: skip


def checkpoint(args: Args, state: RunState, iteration: int, agent, optimizer, scaler, envs, store: Storage, device) -> dict:
    return {
        "format": 1, "args": dataclasses.asdict(args), "iteration": iteration, "global_step": state.global_step,
        "agent": agent.state_dict(), "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict() if scaler is not None else None, "envs": envs.state_dict(),
        "next_obs": store.next_obs.cpu(), "rng": rng_state(device),
        "episodes": {"steps": state.ep_steps, "returns": state.ep_returns, "lengths": state.ep_lengths},
        "timing": state.timing, "reached": state.reached, "update_epochs": state.update_epochs,
        "device": str(device),  # which device this rank ran on (each rank its own GPU)
        "loss_scale": scaler.get_scale() if scaler is not None else None,
    }  # fmt: skip


def result_record(
    args: Args, state: RunState, iteration: int, num_iterations: int, world_size: int, device, resumed: bool
) -> dict:
    """result.json: what the run reached, how fast, on what."""
    window, steps, timing, reached = state.ep_returns[-args.target_window :], state.global_step, state.timing, state.reached
    return {
        "solved": reached["steps_to_target"] is not None, "target_return": args.target_return,
        "target_window": args.target_window, "final_mean_return": sum(window) / len(window) if window else None,
        "episodes": len(state.ep_returns), **reached, "wall_seconds": timing["wall"], "cpu_seconds": timing["cpu"],
        "sps_end_to_end": steps / max(timing["wall"], 1e-9), "sps_rollout": steps / max(timing["rollout"], 1e-9),
        "sps_update": steps / max(timing["update"], 1e-9), "total_env_steps": steps, "iterations": iteration,
        "finished": iteration >= num_iterations or reached["steps_to_target"] is not None, "seed": args.seed,
        "backend": args.backend, "env_id": args.env_id, "num_envs": args.num_envs,
        "num_envs_total": args.num_envs * world_size, "world_size": world_size, "torch_threads": torch.get_num_threads(),
        "resumed": resumed, **device_facts(device), "versions": outputs.versions(), "args": dataclasses.asdict(args),
    }  # fmt: skip


# =============================================================================
# Speed-study options: --adam, --amp, --compile, --cuda-graphs
# (docs/ppo-benchmark.md measures what each is worth). Each leaves the algorithm as it is.
# =============================================================================


def make_optimizer(args: Args, params) -> torch.optim.Adam:
    impl = {"fused": True} if args.adam in ("auto", "fused") else {"foreach": True}
    return torch.optim.Adam(params, lr=args.learning_rate, eps=1e-5, **impl)


def make_autocast(args: Args, device: torch.device):
    """A context-manager factory: autocast to the --amp dtype, or nothing."""
    dtype = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.amp]
    if dtype is None:
        return contextlib.nullcontext
    # A CUDA graph must not keep autocast's cached weight casts (they would go stale).
    return functools.partial(torch.autocast, device.type, dtype=dtype, cache_enabled=not args.cuda_graphs)


def maybe_compile(fn, args: Args):
    return torch.compile(fn) if args.compile else fn


def graph_of_rollout(rollout, envs, store: Storage, device: torch.device) -> torch.cuda.CUDAGraph:
    """Capture the rollout; its warm-up runs step the environments, so put them back where they were."""
    saved_env, saved_obs, saved_rng = envs.state_dict(), store.next_obs.clone(), rng_state(device)
    graph = capture_cuda_graph(rollout, device)
    envs.load_state_dict(saved_env)
    store.next_obs.copy_(saved_obs)
    set_rng_state(saved_rng, device)
    return graph


# =============================================================================
# Training.
# =============================================================================


def ppo_loss(agent, args: Args, autocast, mb_obs, mb_actions, mb_logprobs, mb_advantages, mb_returns, mb_values):
    """The clipped PPO loss of one minibatch, and its stats (policy and value loss, entropy, approx. KL, clip fraction)."""
    with autocast():
        newlogprob, entropy, newvalue = agent.evaluate(mb_obs, mb_actions)
    newlogprob, entropy, newvalue = newlogprob.float(), entropy.float(), newvalue.float()
    if args.norm_adv:
        mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
    pg_loss, approx_kl, clipfrac = clipped_policy_loss(newlogprob, mb_logprobs, mb_advantages, args.clip_coef)
    v_loss = clipped_value_loss(newvalue, mb_values, mb_returns, args.clip_coef, args.clip_vloss)
    entropy_loss = entropy.mean()
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
    return loss, torch.stack((pg_loss, v_loss, entropy_loss, approx_kl, clipfrac)).detach()


def ppo_update(args: Args, batch: list[torch.Tensor], loss_fn, optimizer, scaler, params, comms: Collectives):
    """Epochs of minibatch steps over one rollout; (summed stats, minibatches, epochs run)."""
    batch_size = batch[0].shape[0]
    minibatch_size = batch_size // args.num_minibatches
    stats_sum = torch.zeros(5, device=batch[0].device)
    n_minibatches, epochs_run = 0, 0
    for _epoch in range(args.update_epochs):
        epochs_run += 1
        # Shuffle once per epoch, then cut contiguous minibatches (one gather per tensor per epoch).
        perm = torch.randperm(batch_size, device=batch[0].device)
        shuffled = [x[perm] for x in batch]
        for start in range(0, batch_size, minibatch_size):
            loss, stats = loss_fn(*(x[start : start + minibatch_size] for x in shuffled))
            optimizer.zero_grad(set_to_none=True)
            (scaler.scale(loss) if scaler is not None else loss).backward()
            if comms.world_size > 1:
                # Scaled gradients are averaged first, then unscaled: every rank then sees the same
                # inf/NaN (GradScaler skips the step on all of them together), the loss scales stay equal.
                flat = torch.cat([p.grad.reshape(-1) for p in params])
                comms.mean_(flat, "all_reduce of the gradients")
                offset = 0
                for p in params:
                    p.grad.copy_(flat[offset : offset + p.numel()].view_as(p.grad))
                    offset += p.numel()
            if scaler is not None:
                scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(params, args.max_grad_norm, foreach=True)
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            stats_sum += stats
            n_minibatches += 1
        if args.target_kl is not None:
            # Decided together: each rank's own KL differs, and a rank that stopped alone
            # would leave the others waiting in their next all_reduce.
            approx_kl = stats[3].clone()
            comms.mean_(approx_kl, "all_reduce of the approximate KL (early stopping)")
            if approx_kl.item() > args.target_kl:
                break
    return stats_sum, n_minibatches, epochs_run


def log_iteration(writer, step: int, lr: float, mean_recent, finished: list, metrics: list, returns, values, sps: float) -> None:
    var_y = returns.var()
    explained_var = (1 - (returns - values).var() / var_y).item() if var_y > 0 else float("nan")
    writer.add_scalar("charts/learning_rate", lr, step)
    if mean_recent is not None:
        writer.add_scalar("charts/episodic_return", mean_recent, step)
    if finished:
        writer.add_scalar("charts/episodic_return_iteration", sum(r[1] for r in finished) / len(finished), step)
        writer.add_scalar("charts/episodic_length", sum(r[2] for r in finished) / len(finished), step)
    for name, value in zip(("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac"), metrics, strict=True):
        writer.add_scalar(f"losses/{name}", value, step)
    writer.add_scalar("losses/explained_variance", explained_var, step)
    writer.add_scalar("charts/SPS", sps, step)


def train(args: Args) -> dict:
    """Run PPO; returns the result dict (also written to out_dir/result.json by rank 0).

    Its clocks (wall and process CPU time) start here, after imports, so the times
    in result.json include setting up environments, networks and the TensorBoard
    writer, but not starting Python and importing torch.
    """
    t_start, cpu_start = time.perf_counter(), time.process_time()
    args = resolve_args(args)
    device = pick_device(args, int(os.environ.get("LOCAL_RANK", "0")))
    comms = Collectives(device, args.dist_timeout)
    rank, world_size = comms.rank, comms.world_size
    if args.threads:
        torch.set_num_threads(args.threads)
    out_dir = Path(args.out_dir)
    ckpt_path = out_dir / ("checkpoint.pt" if world_size == 1 else f"checkpoint-rank{rank}.pt")
    ckpt = resume_point(args, comms, ckpt_path)
    T, N = args.num_steps, args.num_envs
    global_batch = N * T * world_size
    num_iterations = max(1, args.total_timesteps // global_batch)

    # Seeding: rank r uses seed + r; all ranks then take rank 0's initial weights.
    seed_everything(args.seed + rank, args.torch_deterministic, device)
    envs = make_envs(args.backend, args.env_id, N, seed=args.seed + 100_000 * rank, device=device)
    obs_shape = envs.single_observation_shape
    agent = Agent(int(np.prod(obs_shape)), envs.num_actions, envs.continuous, args.hidden_size, args.activation).to(device)
    for p in agent.parameters():
        comms.broadcast_(p.data, "the initial weights (broadcast from rank 0)")
    params = list(agent.parameters())
    optimizer = make_optimizer(args, params)
    scaler = torch.amp.GradScaler("cuda") if args.amp == "fp16" else None
    autocast = make_autocast(args, device)
    store = Storage.allocate(T, N, envs, device)
    if ckpt is None:
        state = RunState()
        store.next_obs.copy_(envs.reset())
    else:
        state = restore(ckpt, agent, optimizer, scaler, envs, store, device)
    recent = deque(state.ep_returns[-args.target_window :], maxlen=args.target_window)

    def act_and_step(obs):
        with autocast():
            action, logprob, value = agent.act(obs)
        return action, logprob, value, envs.step(action)

    act_and_step = maybe_compile(act_and_step, args)

    @torch.no_grad()
    def rollout():
        for t in range(T):
            store.obs[t].copy_(store.next_obs)
            action, logprob, value, out = act_and_step(store.next_obs)
            for buf, value_t in ((store.actions, action), (store.logprobs, logprob), (store.values, value),
                                 (store.rewards, out.reward), (store.terms, out.terminated), (store.truncs, out.truncated),
                                 (store.final_obs, out.final_obs), (store.ep_ret, out.episode_return),
                                 (store.ep_len, out.episode_length)):  # fmt: skip
                buf[t].copy_(value_t)
            store.next_obs.copy_(out.obs)

    rollout_graph = graph_of_rollout(rollout, envs, store, device) if args.cuda_graphs else None

    loss_fn = maybe_compile(functools.partial(ppo_loss, agent, args, autocast), args)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def save(iteration: int) -> None:
        if world_size > 1 and ckpt_path.exists():  # keep the one before: a rank that died mid-save may lack the newest
            os.replace(ckpt_path, previous_checkpoint(ckpt_path))
        outputs.save_checkpoint(ckpt_path, checkpoint(args, state, iteration, agent, optimizer, scaler, envs, store, device))

    writer = outputs.open_writer(out_dir, args, resumed_at=state.global_step if ckpt else None) if rank == 0 else None
    progress = outputs.Progress(
        args.total_timesteps, state.global_step, bar=args.progress, interval=args.progress_interval, quiet=rank != 0
    )
    timing = state.timing
    wall0, cpu0 = timing["wall"], timing["cpu"]  # carried over from the interrupted run
    t_loop, last_ckpt = time.perf_counter(), time.monotonic()
    iteration = state.start_iteration - 1
    for iteration in range(state.start_iteration, num_iterations + 1):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / num_iterations) * args.learning_rate

        # --- rollout -----------------------------------------------------------------
        sync()
        t0 = time.perf_counter()
        rollout_graph.replay() if rollout_graph is not None else rollout()
        sync()
        timing["rollout"] += time.perf_counter() - t0
        iter_start_step = state.global_step
        state.global_step += global_batch

        # Episodes that ended in this rollout: one read-back per iteration, every rank's.
        done = store.ep_len > 0
        rows = torch.stack((done.nonzero()[:, 0].double(), store.ep_ret[done].double(), store.ep_len[done].double()), 1)
        finished = [
            row for rows_r in comms.gather(rows.cpu().tolist(), "all_gather_object of the finished episodes") for row in rows_r
        ]
        for t, ret, length in finished:
            state.ep_steps.append(iter_start_step + (int(t) + 1) * N * world_size)
            state.ep_returns.append(ret)
            state.ep_lengths.append(int(length))
            recent.append(ret)

        # --- advantages and update --------------------------------------------------------
        t0 = time.perf_counter()
        with torch.no_grad():
            rewards = store.rewards
            if args.bootstrap_truncation:
                # A time-limit cut is not a failure: add gamma * V(final obs) to its reward.
                cut = (store.truncs & ~store.terms).float()
                with autocast():
                    final_values = agent.value(store.final_obs.reshape((-1,) + obs_shape)).float()
                rewards = store.rewards + args.gamma * final_values.view(T, N) * cut
            with autocast():
                next_value = agent.value(store.next_obs).float()
            dones = (store.terms | store.truncs).float()
            advantages, returns = compute_gae(rewards, store.values, dones, next_value, args.gamma, args.gae_lambda)
        batch = [store.obs.reshape((-1,) + obs_shape), store.actions.reshape((N * T,) + store.actions.shape[2:]),
                 store.logprobs.reshape(-1), advantages.reshape(-1), returns.reshape(-1), store.values.reshape(-1)]  # fmt: skip
        stats_sum, n_minibatches, epochs_run = ppo_update(args, batch, loss_fn, optimizer, scaler, params, comms)
        state.update_epochs.append(epochs_run)
        sync()
        timing["update"] += time.perf_counter() - t0

        # --- bookkeeping ---------------------------------------------------------------
        timing["wall"] = wall0 + time.perf_counter() - t_start
        timing["cpu"] = cpu0 + time.process_time() - cpu_start
        mean_recent = sum(recent) / len(recent) if recent else None
        if state.reached["steps_to_target"] is None and reached_target(args, recent, mean_recent):
            state.reached = {
                "steps_to_target": state.global_step,
                "seconds_to_target": timing["wall"],
                "cpu_seconds_to_target": timing["cpu"],
            }
            if rank == 0:
                print(f"ppo_bench: target reached: mean return {mean_recent:.1f} >= {args.target_return:g} over the last "
                      f"{args.target_window} episodes at step {state.global_step:,} after {timing['wall']:.2f}s", flush=True)  # fmt: skip
        sps = (state.global_step - (state.start_iteration - 1) * global_batch) / max(time.perf_counter() - t_loop, 1e-9)
        progress.update(state.global_step, mean_recent, sps, timing["wall"])
        if writer is not None:
            metrics = (stats_sum / max(n_minibatches, 1)).tolist()
            log_iteration(
                writer,
                state.global_step,
                optimizer.param_groups[0]["lr"],
                mean_recent,
                finished,
                metrics,
                batch[4],
                batch[5],
                sps,
            )

        stop = args.stop_at_target and state.reached["steps_to_target"] is not None
        sliced = args.stop_after_iterations and iteration - state.start_iteration + 1 >= args.stop_after_iterations
        if stop or sliced or iteration == num_iterations:
            break
        due = bool(args.checkpoint_every) and time.monotonic() - last_ckpt >= args.checkpoint_every
        if comms.any(due, "the checkpoint decision (all_reduce)"):  # every rank saves the same iteration
            save(iteration)
            last_ckpt = time.monotonic()

    progress.close()
    save(iteration)
    envs.close()
    comms.barrier("the barrier after the last checkpoint")
    result = result_record(args, state, iteration, num_iterations, world_size, device, resumed=ckpt is not None)
    result["process_wall_seconds"] = time.perf_counter() - t_start
    if rank == 0:
        outputs.finish(writer, out_dir, args, state.ep_steps, state.ep_returns, state.reached, result)
    comms.barrier("the barrier after the result")
    comms.close()
    return result


def reached_target(args: Args, recent: deque, mean_recent: float | None) -> bool:
    return args.target_return is not None and len(recent) == args.target_window and mean_recent >= args.target_return


def previous_checkpoint(ckpt_path: Path) -> Path:
    return ckpt_path.with_suffix(".prev.pt")


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
    candidates = [ckpt_path, previous_checkpoint(ckpt_path)]
    if comms.world_size > 1 and not ckpt_path.exists():
        candidates = sorted(ckpt_path.parent.glob("checkpoint-rank*.pt"))[:1]
        candidates += [previous_checkpoint(path) for path in candidates]
    for path in candidates[: 1 if comms.world_size == 1 else 2]:
        if path.exists():
            ckpt = outputs.load_checkpoint(path)
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
