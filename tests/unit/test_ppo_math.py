"""The pieces of the PPO update: GAE, clipped losses, the policy's log-probabilities."""

import math

import pytest
import torch

from ppo_bench.agents import Agent
from ppo_bench.ppo import clipped_policy_loss, clipped_value_loss, compute_gae

pytestmark = pytest.mark.unit


def reference_gae(rewards, values, dones, next_value, gamma, lam):
    """Plain Python, one environment at a time; dones[t] = episode ended at step t."""
    T, N = len(rewards), len(rewards[0])
    adv = [[0.0] * N for _ in range(T)]
    for n in range(N):
        running = 0.0
        for t in reversed(range(T)):
            if dones[t][n]:
                next_v, running = 0.0, 0.0
            else:
                next_v = values[t + 1][n] if t + 1 < T else next_value[n]
            delta = rewards[t][n] + gamma * next_v - values[t][n]
            running = delta + gamma * lam * running
            adv[t][n] = running
    return adv


def test_gae_matches_a_plain_reference_loop():
    g = torch.Generator().manual_seed(0)
    T, N = 9, 5
    rewards = torch.randn(T, N, generator=g, dtype=torch.float64)
    values = torch.randn(T, N, generator=g, dtype=torch.float64)
    dones = (torch.rand(T, N, generator=g) < 0.25).double()
    next_value = torch.randn(N, generator=g, dtype=torch.float64)
    adv, ret = compute_gae(rewards, values, dones, next_value, 0.99, 0.95)
    expected = torch.tensor(
        reference_gae(rewards.tolist(), values.tolist(), dones.tolist(), next_value.tolist(), 0.99, 0.95), dtype=torch.float64
    )
    assert dones.sum() > 0  # the case with episode boundaries is exercised
    torch.testing.assert_close(adv, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ret, expected + values, rtol=1e-12, atol=1e-12)


def test_gae_hand_computed_two_steps():
    # gamma=0.5, lambda=0.5; step 0 continues, step 1 ends the episode.
    rewards = torch.tensor([[1.0], [2.0]])
    values = torch.tensor([[0.5], [1.0]])
    dones = torch.tensor([[0.0], [1.0]])
    adv, _ = compute_gae(rewards, values, dones, torch.tensor([100.0]), 0.5, 0.5)
    # t=1: delta = 2 - 1 = 1 (next value masked). t=0: delta = 1 + 0.5*1 - 0.5 = 1; adv = 1 + 0.25*1
    assert adv.flatten().tolist() == [1.25, 1.0]


def test_clipped_policy_loss_hand_computed():
    ratio = torch.tensor([1.5, 1.5, 0.5, 0.5, 1.0])
    adv = torch.tensor([2.0, -2.0, 2.0, -2.0, 1.0])
    old = torch.zeros(5)
    pg, approx_kl, clipfrac = clipped_policy_loss(ratio.log(), old, adv, 0.2)
    # per sample max(-A*r, -A*clip(r)): -2.4, 3.0, -1.0, 1.6, -1.0
    assert pg.item() == pytest.approx((-2.4 + 3.0 - 1.0 + 1.6 - 1.0) / 5)
    assert clipfrac.item() == pytest.approx(0.8)
    expected_kl = sum((r - 1) - math.log(r) for r in ratio.tolist()) / 5
    assert approx_kl.item() == pytest.approx(expected_kl)


def test_clipped_policy_loss_has_no_gradient_where_clipped():
    newlogprob = torch.tensor([math.log(1.5), math.log(1.1)], requires_grad=True)
    pg, _, _ = clipped_policy_loss(newlogprob, torch.zeros(2), torch.tensor([2.0, 2.0]), 0.2)
    pg.backward()
    # sample 0: ratio 1.5 > 1.2 with A > 0 -> clipped, no gradient; sample 1 inside -> -A*r/2
    assert newlogprob.grad[0].item() == 0.0
    assert newlogprob.grad[1].item() == pytest.approx(-2.0 * 1.1 / 2)


def test_clipped_value_loss_hand_computed():
    new = torch.tensor([1.0, 0.1])
    old = torch.tensor([0.0, 0.0])
    ret = torch.tensor([2.0, 2.0])
    # sample 0: unclipped (1-2)^2 = 1, clipped (0.2-2)^2 = 3.24 -> 3.24; sample 1: both 3.61
    assert clipped_value_loss(new, old, ret, 0.2).item() == pytest.approx(0.5 * (3.24 + 3.61) / 2)
    assert clipped_value_loss(new, old, ret, 0.2, clip=False).item() == pytest.approx(0.5 * (1.0 + 3.61) / 2)


def test_discrete_agent_logprob_entropy_match_torch_distributions():
    torch.manual_seed(0)
    agent = Agent(4, 3, continuous=False)
    for p in agent.actor[-1].parameters():  # make the policy far from uniform
        p.data.normal_(0, 1)
    obs = torch.randn(64, 4)
    action, logprob, value = agent.act(obs)
    dist = torch.distributions.Categorical(logits=agent.actor(obs))
    torch.testing.assert_close(logprob, dist.log_prob(action))
    lp, ent, v = agent.evaluate(obs, action)
    torch.testing.assert_close(lp, dist.log_prob(action))
    torch.testing.assert_close(ent, dist.entropy())
    torch.testing.assert_close(v, value)


def test_gumbel_max_sampling_follows_the_softmax():
    torch.manual_seed(1)
    agent = Agent(4, 3, continuous=False)
    obs = torch.zeros(1, 4)
    with torch.no_grad():
        agent.actor[-1].weight.zero_()
        agent.actor[-1].bias.copy_(torch.tensor([0.0, 1.0, 2.0]))
        probs = torch.softmax(agent.actor(obs), -1)[0]
        actions, _, _ = agent.act(obs.expand(40_000, 4))
    freq = torch.bincount(actions, minlength=3).double() / actions.numel()
    torch.testing.assert_close(freq, probs.double(), atol=0.01, rtol=0)


def test_gaussian_agent_matches_torch_normal():
    torch.manual_seed(0)
    agent = Agent(3, 2, continuous=True)
    agent.actor_logstd.data.copy_(torch.tensor([[-0.5, 0.3]]))
    obs = torch.randn(32, 3)
    action, logprob, _ = agent.act(obs)
    dist = torch.distributions.Normal(agent.actor(obs), agent.actor_logstd.exp().expand(32, 2))
    torch.testing.assert_close(logprob, dist.log_prob(action).sum(-1))
    lp, ent, _ = agent.evaluate(obs, action)
    torch.testing.assert_close(lp, dist.log_prob(action).sum(-1))
    torch.testing.assert_close(ent, dist.entropy().sum(-1))
