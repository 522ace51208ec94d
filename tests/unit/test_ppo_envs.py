"""The torch CartPole against gymnasium's CartPole-v1, and the gymnasium adapter."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from ppo_bench.envs import GymVectorEnv, TorchCartPole

pytestmark = pytest.mark.unit


def balancing_action(state) -> int:
    """A linear controller that keeps CartPole up for 500 steps (to reach truncation)."""
    x, x_dot, theta, theta_dot = state
    return int(3 * theta + theta_dot + 0.1 * x + 0.5 * x_dot > 0)


def test_torch_cartpole_matches_gymnasium_step_for_step():
    """Same states and actions into both; compare every step, through terminations,
    truncations at 500 steps, and the resets that follow them."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    tenv = TorchCartPole(1, dtype=torch.float64)
    genv = gym.make("CartPole-v1")
    genv.reset(seed=0)
    tenv.reset()
    genv.unwrapped.state = tenv.state[0].numpy().copy()
    terminations = truncations = episode_steps = 0
    random_episode = True  # alternate: random actions (short episodes), then the controller
    for _ in range(3000):
        state = genv.unwrapped.state.copy()
        # Identical state in: set the torch env to gymnasium's state (no drift can build up).
        tenv.state[0] = torch.from_numpy(state)
        action = int(rng.integers(2)) if random_episode else balancing_action(state)
        g_obs, g_rew, g_term, g_trunc, _ = genv.step(action)
        out = tenv.step(torch.tensor([action]))
        episode_steps += 1
        assert out.reward.item() == g_rew == 1.0
        assert bool(out.terminated) == g_term
        assert bool(out.truncated) == g_trunc
        np.testing.assert_allclose(out.final_obs[0].numpy(), g_obs, rtol=0, atol=1e-6)
        if not (g_term or g_trunc):
            np.testing.assert_allclose(tenv.state[0].numpy(), genv.unwrapped.state, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(out.obs[0].numpy(), g_obs, rtol=0, atol=1e-6)
            assert out.episode_length.item() == 0 and out.episode_return.item() == 0.0
            continue
        # Episode over: the torch env reports it and has already reset (same step).
        assert out.episode_length.item() == episode_steps
        assert out.episode_return.item() == float(episode_steps)
        assert tenv.steps.item() == 0
        assert torch.all(out.obs.abs() <= 0.05)
        assert not torch.allclose(out.obs, out.final_obs)
        terminations += g_term
        truncations += g_trunc
        if g_trunc:
            assert episode_steps == 500
        genv.reset()
        genv.unwrapped.state = tenv.state[0].numpy().copy()
        episode_steps = 0
        random_episode = not random_episode
    assert terminations >= 5 and truncations >= 2


def test_torch_cartpole_float32_follows_float64():
    torch.manual_seed(3)
    e64 = TorchCartPole(256, dtype=torch.float64)
    e32 = TorchCartPole(256, dtype=torch.float32)
    e64.reset()
    e32.state.copy_(e64.state)
    for _ in range(20):
        a = torch.randint(0, 2, (256,))
        o64, o32 = e64.step(a), e32.step(a)
        alive = ~(o64.terminated | o64.truncated)
        np.testing.assert_allclose(o32.final_obs[alive].numpy(), o64.final_obs[alive].numpy(), atol=1e-4)
        e32.state.copy_(e64.state)


def test_torch_cartpole_reset_rule_is_uniform_in_plus_minus_005():
    torch.manual_seed(0)
    env = TorchCartPole(20_000)
    obs = env.reset()
    assert obs.shape == (20_000, 4) and obs.dtype == torch.float32
    assert obs.min() >= -0.05 and obs.max() <= 0.05
    assert obs.min() < -0.0499 and obs.max() > 0.0499
    assert obs.mean(0).abs().max() < 0.002
    np.testing.assert_allclose(obs.std(0).numpy(), 0.1 / np.sqrt(12), rtol=0.03)


def test_torch_cartpole_terminates_at_the_thresholds():
    env = TorchCartPole(4, dtype=torch.float64)
    env.reset()
    # x just inside / moving out; theta just inside / rotating out (12 degrees = 0.2094 rad)
    env.state.copy_(
        torch.tensor(
            [[2.39, 0.0, 0.0, 0.0], [2.39, 1.0, 0.0, 0.0], [0.0, 0.0, 0.209, 0.0], [0.0, 0.0, 0.209, 0.5]], dtype=torch.float64
        )
    )
    out = env.step(torch.tensor([0, 1, 1, 0]))
    assert out.terminated.tolist() == [False, True, False, True]
    assert out.truncated.tolist() == [False] * 4
    assert out.reward.tolist() == [1.0] * 4


def test_torch_cartpole_truncates_at_500_steps():
    env = TorchCartPole(2)
    env.reset()
    env.steps.copy_(torch.tensor([498, 10], dtype=torch.int32))
    env.state.zero_()
    out = env.step(torch.tensor([0, 1]))
    assert out.truncated.tolist() == [False, False]
    out = env.step(torch.tensor([1, 0]))
    assert out.truncated.tolist() == [True, False]
    assert out.terminated.tolist() == [False, False]
    assert out.episode_return.tolist() == [500.0, 0.0]
    assert out.episode_length.tolist() == [500, 0]
    assert env.steps.tolist() == [0, 12]


def test_cleanrl_style_loop_sees_no_final_info_under_gymnasium_1x():
    """Why CleanRL's ppo.py records no returns on gymnasium 1.x: the default
    autoreset mode is NEXT_STEP and "final_info" never appears in infos."""
    envs = gym.vector.SyncVectorEnv([lambda: gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1")) for _ in range(4)])
    envs.reset(seed=0)
    dones = 0
    for _ in range(200):
        _, _, term, trunc, infos = envs.step(envs.action_space.sample())
        dones += int((term | trunc).sum())
        assert "final_info" not in infos
    assert dones > 0


def test_gym_backend_records_every_episode_return():
    envs = GymVectorEnv("CartPole-v1", num_envs=4, seed=0)
    envs.reset()
    g = torch.Generator().manual_seed(0)
    running = np.zeros(4)
    length = np.zeros(4, dtype=int)
    recorded = []
    for _ in range(300):
        out = envs.step(torch.randint(0, 2, (4,), generator=g))
        running += out.reward.numpy()
        length += 1
        done = (out.terminated | out.truncated).numpy()
        np.testing.assert_array_equal(out.episode_length.numpy() > 0, done)
        for i in np.flatnonzero(done):
            assert out.episode_return[i].item() == pytest.approx(running[i])
            assert out.episode_length[i].item() == length[i]
            # same-step reset: the returned observation starts the next episode
            assert torch.all(out.obs[i].abs() <= 0.05)
            assert not torch.equal(out.obs[i], out.final_obs[i])
            recorded.append(running[i])
            running[i], length[i] = 0.0, 0
    envs.close()
    assert len(recorded) >= 30
    assert all(r >= 8 for r in recorded)  # CartPole's shortest possible episode is 8 steps


def test_gym_backend_state_dict_continues_identically():
    a = GymVectorEnv("CartPole-v1", num_envs=3, seed=5)
    a.reset()
    actions = [torch.tensor([i % 2, (i // 3) % 2, 1]) for i in range(120)]
    for act in actions[:40]:
        a.step(act)
    saved = a.state_dict()
    tail_a = [a.step(act) for act in actions[40:]]
    b = GymVectorEnv("CartPole-v1", num_envs=3, seed=99)
    b.reset()
    b.load_state_dict(saved)
    tail_b = [b.step(act) for act in actions[40:]]
    for x, y in zip(tail_a, tail_b, strict=True):
        for fx, fy in zip(x, y, strict=True):
            assert torch.equal(fx, fy)


def test_gym_backend_pendulum_has_box_actions():
    envs = GymVectorEnv("Pendulum-v1", num_envs=2, seed=0)
    obs = envs.reset()
    assert envs.continuous and envs.num_actions == 1 and obs.shape == (2, 3)
    for _ in range(200):  # Pendulum truncates at 200 steps
        out = envs.step(torch.full((2, 1), 5.0))  # out of bounds: clipped to 2.0
    assert out.truncated.all() and (out.episode_length == 200).all()
    assert (out.episode_return < 0).all()
