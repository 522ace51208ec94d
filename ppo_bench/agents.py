"""The networks PPO trains, CleanRL's layouts and init: `Agent` (separate actor and critic MLPs,
64-64 tanh, for vector observations; a categorical policy for discrete actions, a diagonal
Gaussian for Box actions) and `AtariAgent` (the Nature CNN with a policy and a value head, over
stacked uint8 frames). Each builds itself for a run with `for_envs(envs, args)`; which one a run
trains is its backend's choice (ppo_bench/backends.py).

Sampling is Gumbel-max and log-probabilities are written out (no torch.distributions), so a whole
rollout can be captured in one CUDA graph.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np
import torch
import torch.nn as nn


class Args(Protocol):
    """What the agents read of the run's settings (ppo_bench.config.Args has them; this module does not
    import config, which imports it)."""

    hidden_size: int
    activation: str
    channels_last: bool


ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}  # --activation: the MLPs' hidden nonlinearity


def layer_init(layer: nn.Module, std: float = math.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def mlp(in_dim: int, out_dim: int, out_std: float, hidden: int, activation: str) -> nn.Sequential:
    act = ACTIVATIONS[activation]
    return nn.Sequential(
        layer_init(nn.Linear(in_dim, hidden)),
        act(),
        layer_init(nn.Linear(hidden, hidden)),
        act(),
        layer_init(nn.Linear(hidden, out_dim), std=out_std),
    )


def sample_categorical(logits: torch.Tensor):
    """A sample of the categorical distribution of `logits`, and its log-probability."""
    logp = logits.float().log_softmax(-1)
    # Gumbel-max trick: argmax(logp + Gumbel) = argmax(logp - log(Exponential)) is a categorical sample.
    action = (logp - torch.empty_like(logp).exponential_().log()).argmax(-1)
    return action, logp.gather(-1, action.unsqueeze(-1)).squeeze(-1)


def categorical_logprob_entropy(logits: torch.Tensor, action: torch.Tensor):
    logp = logits.float().log_softmax(-1)
    return logp.gather(-1, action.long().unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)


class Agent(nn.Module):
    """Categorical policy for discrete actions, diagonal Gaussian for Box actions."""

    image_inputs = False  # --channels-last has nothing to lay out

    @classmethod
    def for_envs(cls, envs, args: Args) -> Agent:
        obs_dim = int(np.prod(envs.single_observation_shape))
        return cls(obs_dim, envs.num_actions, envs.continuous, args.hidden_size, args.activation)

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
            action, logprob = sample_categorical(out)
        return action, logprob, self.value(obs)

    def evaluate(self, obs: torch.Tensor, action: torch.Tensor):
        """Log-probability and entropy of given actions, and V(obs)."""
        out = self.actor(obs)
        if self.continuous:
            logstd = self.actor_logstd.expand_as(out)
            logprob = gaussian_logprob(action, out, logstd).sum(-1)
            entropy = (0.5 + 0.5 * math.log(2 * math.pi) + logstd).sum(-1)
        else:
            logprob, entropy = categorical_logprob_entropy(out, action)
        return logprob, entropy, self.value(obs)


class AtariAgent(nn.Module):
    """The Nature DQN network (Mnih et al. 2015) as CleanRL's PPO uses it: three convolutions and a
    512-unit layer shared by a policy head and a value head, over 4 stacked 84x84 uint8 frames."""

    image_inputs = True  # --channels-last lays out its weights and inputs

    @classmethod
    def for_envs(cls, envs, args: Args) -> AtariAgent:
        return cls(envs.num_actions, envs.single_observation_shape[0], args.channels_last)

    def __init__(self, num_actions: int, in_frames: int = 4, channels_last: bool = False):
        super().__init__()
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(in_frames, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(512, num_actions), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1)
        self.to(memory_format=self.memory_format)

    def hidden(self, obs: torch.Tensor) -> torch.Tensor:
        return self.network((obs.float() / 255.0).contiguous(memory_format=self.memory_format))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.hidden(obs)).squeeze(-1)

    def act(self, obs: torch.Tensor):
        hidden = self.hidden(obs)
        action, logprob = sample_categorical(self.actor(hidden))
        return action, logprob, self.critic(hidden).squeeze(-1)

    def evaluate(self, obs: torch.Tensor, action: torch.Tensor):
        hidden = self.hidden(obs)
        logprob, entropy = categorical_logprob_entropy(self.actor(hidden), action)
        return logprob, entropy, self.critic(hidden).squeeze(-1)


def gaussian_logprob(x: torch.Tensor, mean: torch.Tensor, logstd: torch.Tensor) -> torch.Tensor:
    return -((x - mean) ** 2) / (2 * torch.exp(2 * logstd)) - logstd - 0.5 * math.log(2 * math.pi)
