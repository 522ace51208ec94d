"""The run's settings: `Args` (every field is a command-line option of `python -m ppo_bench`,
its docstring the option's help), and `resolve_args`: the backend (ppo_bench/backends.py: which
ids it plays, its defaults), the id checked by it, and the checks that the settings can work
together."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ppo_bench.agents import ACTIVATIONS
from ppo_bench.backends import BACKENDS, backend_for
from ppo_bench.envs import TorchCartPole
from ppo_bench.errors import ConfigError


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
    threads: int | None = None
    """torch CPU threads (torch.set_num_threads); 0 keeps torch's default (one per core). Default: 1 for the MLP policies
    (too small to gain from more; extra threads spin against other work on a shared CPU), 0 for atari (the CNN's
    convolutions use every core)"""

    # --- environment ----------------------------------------------------------
    backend: str = "auto"
    """'torch': CartPole-v1 batched in torch on the device; 'gymnasium': gymnasium vector envs on the host; 'atari': ALE games
    in ale-py's vector environment (C++ threads), Nature CNN policy; 'auto': atari for ALE/... and envpool/... ids, torch for
    CartPole-v1, else gymnasium"""
    env_id: str = TorchCartPole.env_id
    """the id of the environment (torch backend: CartPole-v1 only; gymnasium: e.g. Pendulum-v1; atari: ALE/Breakout-v5 as
    gymnasium defines it, sticky actions 0.25, or envpool/Breakout-v5 with EnvPool's settings, no sticky actions, as CleanRL's
    ppo_atari_envpool.py trains)"""
    num_envs: int | None = None
    """parallel environments per process (default per backend: torch 256, gymnasium 4, atari 8)"""

    # --- algorithm --------------------------------------------------------------
    total_timesteps: int | None = None
    """total environment steps over all processes (default: torch 2,000,000, gymnasium 500,000, atari 10,000,000)"""
    learning_rate: float | None = None
    """Adam learning rate (default: torch 4e-3, gymnasium and atari 2.5e-4)"""
    num_steps: int | None = None
    """steps per environment per rollout (default: torch 16, gymnasium and atari 128)"""
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
    clip_coef: float | None = None
    """the surrogate clipping coefficient, also clips the value loss (default: atari 0.1 as CleanRL, else 0.2)"""
    clip_vloss: bool | None = None
    """use the clipped value loss of the PPO paper (default: torch backend off, it slowed learning there; gymnasium and atari on, as CleanRL)"""
    ent_coef: float | None = None
    """coefficient of the entropy bonus (default: torch 0.0, gymnasium and atari 0.01 as CleanRL)"""
    vf_coef: float = 0.5
    """coefficient of the value loss"""
    max_grad_norm: float = 0.5
    """the maximum norm for gradient clipping"""
    target_kl: float | None = None
    """stop an update's epochs early when the approximate KL exceeds this; 0 = never (default: torch 0.03, gymnasium and atari 0)"""
    bootstrap_truncation: bool = True
    """bootstrap truncated episodes (time limit) with V(final observation) instead of treating them as terminal"""
    hidden_size: int = 64
    """width of the two hidden layers of the actor and of the critic (MLP policies; atari uses the Nature CNN)"""
    activation: str = "tanh"
    """hidden activation of the MLP policies: 'tanh' (CleanRL) or 'relu'"""

    # --- target and outputs -------------------------------------------------------
    target_return: float | None = None
    """mean return over the last `target_window` episodes that counts as solved (default: the env's reward threshold, 475 for
    CartPole-v1; ALE games have none). Atari returns are whole games, unclipped"""
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
    time_limit: float = 0.0
    """stop (with a checkpoint) after the iteration during which this many seconds have passed since the start; 0 = no limit.
    For benchmarks of a fixed duration (`proof --bench atari --seconds N`)"""
    dist_timeout: float = 300.0
    """torchrun jobs: seconds a collective waits for the other ranks; then the run fails with one line naming the rank and the collective"""

    # --- speed options (docs/ppo-benchmark.md says what each one is worth) --------
    cuda_graphs: bool = False
    """cuda only. torch backend: capture each rollout (policy + torch CartPole, num_steps steps) in one CUDA graph; gymnasium
    and atari: with --compile, compile in mode 'reduce-overhead' (CUDA graphs of the policy step and of the loss)"""
    compile: bool = False
    """torch.compile the rollout step and the loss (needs a C++ compiler on CPU; compiling takes tens of seconds)"""
    channels_last: bool = False
    """atari: the Nature CNN's weights and inputs in channels-last memory format"""
    amp: str | None = None
    """automatic mixed precision for the networks: 'off', 'bf16', 'fp16' (cuda only, with GradScaler), or 'auto' (bf16 where
    the device computes it natively: a CUDA GPU that supports it, a CPU with AVX512-BF16 or AMX; else off). Default: atari
    auto, else off"""
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
    "time_limit",
    "require_gpu",
    "fail_below_target",
    "stop_at_target",
    "dist_timeout",
}


def resolve_args(args: Args) -> Args:
    """Fill backend defaults and check that the arguments can work together."""
    if args.backend == "auto":
        args = dataclasses.replace(args, backend=backend_for(args.env_id).name)
    if args.backend not in BACKENDS:
        raise ConfigError(f"--backend must be one of auto, {', '.join(BACKENDS)}, not {args.backend!r}")
    backend = BACKENDS[args.backend]
    backend.env.check_id(args.env_id)  # the one place an id is validated: its backend's rule
    filled = {k: v for k, v in backend.defaults.items() if getattr(args, k) is None}
    args = dataclasses.replace(args, **filled)
    if args.target_kl is not None and args.target_kl <= 0:
        args = dataclasses.replace(args, target_kl=None)
    if args.target_return is None:
        args = dataclasses.replace(args, target_return=backend.env.reward_threshold(args.env_id))
    if args.time_limit < 0:
        raise ConfigError(f"--time-limit must be 0 (none) or a number of seconds, got {args.time_limit}")
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
    if args.amp not in ("off", "bf16", "fp16", "auto"):
        raise ConfigError(f"--amp must be off, bf16, fp16 or auto, not {args.amp!r}")
    if args.activation not in ACTIVATIONS:
        raise ConfigError(f"--activation must be one of {', '.join(ACTIVATIONS)}, not {args.activation!r}")
    if args.adam not in ("auto", "foreach", "fused"):
        raise ConfigError(f"--adam must be auto, foreach or fused, not {args.adam!r}")
    if args.require_gpu and args.device == "cpu":
        raise ConfigError("--require-gpu contradicts --device cpu")
    if args.cuda_graphs and not backend.env.steps_on_device and not args.compile:
        raise ConfigError(f"--cuda-graphs with --backend {args.backend} needs --compile (the environments step on the host)")
    if args.channels_last and not backend.agent.image_inputs:
        cnn = " or ".join(b.name for b in BACKENDS.values() if b.agent.image_inputs)
        raise ConfigError(f"--channels-last is for the {cnn} backend's CNN; the {args.backend} backend's MLP has no image inputs")
    if args.fail_below_target and args.target_return is None:
        raise ConfigError(f"--fail-below-target needs --target-return ({args.env_id} has no reward threshold)")
    return args
