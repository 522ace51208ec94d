"""The environment backends, one entry each: which ids it plays, its environments, its agent,
and the algorithm settings that suit it. config.py picks and checks a run's backend here
(`--backend auto`: the first entry that claims the id), ppo.py builds from it; nothing else
names a backend.

To add one: an environment class with `check_id`, `reward_threshold`, `open` and `settings`
(ppo_bench/envs.py), an agent with `for_envs` (ppo_bench/agents.py), one entry below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ppo_bench.agents import Agent, AtariAgent
from ppo_bench.envs import ALE, ENVPOOL, AtariEnv, GymVectorEnv, TorchCartPole


@dataclass(frozen=True)
class Backend:
    name: str
    env: type  # its environments: env.open(env_id, num_envs, seed, device); env.check_id(env_id) validates an id
    agent: type  # its policy: agent.for_envs(envs, args)
    defaults: dict  # Args fields left None take these
    claims: Callable[[str], bool]  # the ids `--backend auto` gives it (env.check_id then says whether it plays one)


# Algorithm settings whose best value depends on the backend. The gymnasium column is CleanRL's
# ppo.py defaults; the others are it with their own changes.
GYMNASIUM_DEFAULTS = dict(
    total_timesteps=500_000,
    num_envs=4,
    num_steps=128,
    learning_rate=2.5e-4,
    num_minibatches=4,
    update_epochs=4,
    clip_vloss=True,
    ent_coef=0.01,
    target_kl=0.0,
    clip_coef=0.2,
    amp="off",
    threads=1,
)
# The torch column was tuned to reach CartPole's target in little CPU time on a 2-core CPU
# (docs/ppo-benchmark.md has the measurements): many more environments and large minibatches (few
# optimizer steps: each costs milliseconds of overhead on a CPU), a 16x learning rate held in check
# by early stopping on KL, no value clipping (with returns of order 100, clipping value updates to
# +-0.2 slowed the critic) and no entropy bonus (it kept the policy from settling at 500).
TORCH_DEFAULTS = {
    **GYMNASIUM_DEFAULTS,
    "total_timesteps": 2_000_000,
    "num_envs": 256,
    "num_steps": 16,
    "learning_rate": 4e-3,
    "clip_vloss": False,
    "ent_coef": 0.0,
    "target_kl": 0.03,
}
# CleanRL's ppo_atari_envpool.py: its ppo.py settings with its own Atari ones, and --amp bf16
# wherever the device computes it natively (the Nature CNN's update took 2.4x less time on this
# project's CPU, docs/benchmarks.md; learning is shown with it there); every core for the CNN.
ATARI_DEFAULTS = {
    **GYMNASIUM_DEFAULTS,
    "total_timesteps": 10_000_000,
    "num_envs": 8,
    "clip_coef": 0.1,
    "amp": "auto",
    "threads": 0,
}

BACKENDS = {
    b.name: b
    for b in (
        Backend(
            "torch",
            TorchCartPole,
            Agent,
            TORCH_DEFAULTS,
            claims=lambda env_id: env_id == TorchCartPole.env_id,
        ),
        Backend(
            "atari",
            AtariEnv,
            AtariAgent,
            ATARI_DEFAULTS,
            claims=lambda env_id: env_id.startswith((ALE, ENVPOOL)),
        ),
        Backend(
            "gymnasium",
            GymVectorEnv,
            Agent,
            GYMNASIUM_DEFAULTS,
            claims=lambda env_id: True,
        ),
    )
}


def backend_for(env_id: str) -> Backend:
    """`--backend auto`: the first backend that claims `env_id`."""
    return next(b for b in BACKENDS.values() if b.claims(env_id))
