"""ppo_bench's Atari mode: the Nature CNN, ale-py's vector environment as the learner sees
it, and short CPU runs (outputs, determinism, --compile against eager)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ppo_bench import __main__ as cli
from ppo_bench.agents import AtariAgent
from ppo_bench.backends import backend_for
from ppo_bench.config import resolve_args
from ppo_bench.envs import AtariEnv, atari_game
from ppo_bench.errors import EXIT_USAGE, ConfigError
from ppo_bench.ppo import Args, train

pytestmark = pytest.mark.unit

FRAMES = (4, 84, 84)


def frames(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (n, *FRAMES), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def test_nature_cnn_shapes():
    torch.manual_seed(0)
    agent = AtariAgent(num_actions=6)
    obs = frames(5)
    assert agent.hidden(obs).shape == (5, 512)  # 32x20x20 -> 64x9x9 -> 64x7x7 = 3136 -> 512
    action, logprob, value = agent.act(obs)
    assert action.shape == logprob.shape == value.shape == (5,)
    assert action.dtype == torch.long and ((0 <= action) & (action < 6)).all()
    assert (logprob <= 0).all()
    newlogprob, entropy, newvalue = agent.evaluate(obs, action)
    torch.testing.assert_close(newlogprob, logprob)
    torch.testing.assert_close(newvalue, value)
    # a fresh policy (head initialised with std 0.01) is nearly uniform over the 6 actions
    assert entropy.min().item() == pytest.approx(np.log(6), abs=1e-3)
    assert sum(p.numel() for p in agent.parameters()) == 1_687_719  # CleanRL's Atari agent with 6 actions


def test_channels_last_computes_the_same_values():
    torch.manual_seed(0)
    plain = AtariAgent(num_actions=4)
    torch.manual_seed(0)
    cl = AtariAgent(num_actions=4, channels_last=True)
    assert cl.network[0].weight.is_contiguous(memory_format=torch.channels_last)
    obs = frames(8, seed=1)
    torch.testing.assert_close(cl.value(obs), plain.value(obs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "env_id, rom",
    [
        ("ALE/Breakout-v5", "breakout"),
        ("ALE/MontezumaRevenge-v5", "montezuma_revenge"),
        ("ALE/Pong-v5", "pong"),
        ("envpool/Breakout-v5", "breakout"),
    ],
)
def test_atari_ids_name_ale_roms(env_id, rom):
    assert atari_game(env_id).rom == rom
    assert backend_for(env_id).name == "atari"


def test_backend_auto_picks_by_environment():
    assert backend_for("CartPole-v1").name == "torch" and backend_for("Pendulum-v1").name == "gymnasium"
    args = resolve_args(Args(env_id="ALE/Breakout-v5"))
    assert (args.backend, args.num_envs, args.num_steps, args.clip_coef, args.learning_rate) == ("atari", 8, 128, 0.1, 2.5e-4)
    assert args.clip_vloss and args.ent_coef == 0.01 and args.target_kl is None and args.amp == "auto"
    assert resolve_args(Args()).backend == "torch" and resolve_args(Args()).clip_coef == 0.2
    assert resolve_args(Args(env_id="envpool/Breakout-v5")).backend == "atari"


def test_unknown_game_is_one_clear_error():
    with pytest.raises(ConfigError, match="gymnasium has no ALE/NoSuchGame-v5"):
        AtariEnv("ALE/NoSuchGame-v5", 1, seed=0)
    with pytest.raises(ConfigError, match="gymnasium has no ALE/NoSuchGame-v5"):
        resolve_args(Args(env_id="ALE/NoSuchGame-v5"))  # before anything is built


# --- the id's version honoured: v5's sticky actions, and CleanRL's EnvPool settings by their own name --------


def test_ale_v5_plays_with_gymnasiums_sticky_actions():
    import ale_py  # noqa: F401  registers ALE/ ids
    import gymnasium as gym

    env = AtariEnv("ALE/Breakout-v5", 1, seed=0)
    try:
        assert env.repeat_action_probability == 0.25 == gym.spec("ALE/Breakout-v5").kwargs["repeat_action_probability"]
        assert env.settings()["repeat_action_probability"] == 0.25
    finally:
        env.close()


def test_envpool_name_plays_cleanrls_settings_without_sticky_actions():
    env = AtariEnv("envpool/Breakout-v5", 1, seed=0)
    try:
        assert env.repeat_action_probability == 0.0
        assert env.settings()["defined_by"].startswith("EnvPool's Breakout-v5")
    finally:
        env.close()


def observations(env_id: str, steps: int = 300) -> list[np.ndarray]:
    """Frames of 2 Breakout games, seed 1, under one fixed random action sequence."""
    env = AtariEnv(env_id, 2, seed=1)
    rng = np.random.default_rng(0)
    try:
        seen = [env.reset().numpy().copy()]
        for _ in range(steps):
            seen.append(env.step(torch.as_tensor(rng.integers(0, env.num_actions, 2))).obs.numpy().copy())
    finally:
        env.close()
    return seen


def test_the_sticky_probability_reaches_the_emulator():
    """Same seed, same actions: the two EnvPool-settings runs agree frame for frame, the v5 run (actions
    repeated with probability 0.25) parts from them."""
    plain, again, sticky = (
        observations("envpool/Breakout-v5"),
        observations("envpool/Breakout-v5"),
        observations("ALE/Breakout-v5"),
    )
    assert all(np.array_equal(a, b) for a, b in zip(plain, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(plain, sticky, strict=True))


@pytest.mark.parametrize("env_id", ["envpool/Breakout-v4", "Breakout-v5"])
def test_other_atari_forms_are_refused_with_the_two_that_work(env_id):
    with pytest.raises(ConfigError, match="envpool/Breakout-v5"):
        resolve_args(Args(backend="atari", env_id=env_id))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--env-id", "CartPole-v1", "--channels-last"], "--channels-last is for the atari backend"),
        (["--backend", "atari", "--env-id", "Breakout-v5"], "plays ALE games"),
        (["--env-id", "ALE/Breakout-v5", "--device", "cpu", "--cuda-graphs", "--compile"], "--cuda-graphs needs a CUDA device"),
        (["--env-id", "ALE/Breakout-v5", "--cuda-graphs"], "needs --compile"),
        (["--time-limit", "-1"], "--time-limit"),
    ],
)
def test_bad_atari_arguments_exit_2(tmp_path, capsys, argv, message):
    assert cli.main([*argv, "--out-dir", str(tmp_path / "x"), "--no-progress"]) == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_the_learner_sees_lives_and_clipped_rewards_the_records_see_whole_games():
    """SpaceInvaders pays 5 to 30 points per invader: the learner's rewards are their sign, a lost
    life ends the learner's episode, and the recorded episode is the whole game with its score."""
    env = AtariEnv("ALE/SpaceInvaders-v5", 2, seed=3)
    try:
        obs = env.reset()
        assert obs.shape == (2, *FRAMES) and obs.dtype == torch.uint8
        rng = np.random.default_rng(0)
        terminations, games, clipped_sum = 0, [], torch.zeros(2)
        for _ in range(3000):
            out = env.step(torch.as_tensor(rng.integers(0, env.num_actions, 2)))
            assert set(out.reward.unique().tolist()) <= {0.0, 1.0}
            clipped_sum += out.reward
            terminations += int(out.terminated.sum())
            done = out.terminated | out.truncated
            assert torch.equal(out.final_obs[~done], out.obs[~done])
            for i in (out.episode_length > 0).nonzero()[:, 0].tolist():
                assert done[i]
                games.append((out.episode_return[i].item(), out.episode_length[i].item()))
            if len(games) >= 2:
                break
    finally:
        env.close()
    assert len(games) >= 2, "random play ends a SpaceInvaders game within 3000 steps"
    assert terminations >= 3 * len(games)  # three lives per game: every lost life terminated the learner's episode
    for score, length in games:
        assert score > 0 and score % 5 == 0, games  # unclipped points
        assert length > 100
    assert sum(score for score, _ in games) > clipped_sum.sum().item()  # more points than clipped rewards


def tiny(out_dir, **overrides) -> Args:
    settings = dict(env_id="ALE/Breakout-v5", num_envs=2, num_steps=64, total_timesteps=2 * 64 * 3, seed=7)
    return Args(**{**settings, **overrides}, out_dir=str(out_dir), progress=False, threads=1, checkpoint_every=0)


def saved(out_dir) -> dict:
    return torch.load(out_dir / "checkpoint.pt", map_location="cpu", weights_only=False)


def test_a_short_cpu_run_writes_every_output_and_repeats_bit_for_bit(tmp_path):
    r = train(tiny(tmp_path / "a"))
    assert r["backend"] == "atari" and r["total_env_steps"] == 384 and r["env_id"] == "ALE/Breakout-v5"
    out = tmp_path / "a"
    assert json.loads((out / "result.json").read_text())["total_env_steps"] == 384
    assert (out / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list(out.glob("events.out.tfevents.*"))
    a = saved(out)
    for name, value in a["agent"].items():
        assert torch.isfinite(value).all(), name
    losses = read_scalars(out, "losses/")
    assert losses and all(np.isfinite(v) for v in losses.values()), losses
    train(tiny(tmp_path / "b"))
    b = saved(tmp_path / "b")
    for name, value in a["agent"].items():
        assert torch.equal(value, b["agent"][name]), name
    assert a["episodes"] == b["episodes"]


def read_scalars(out_dir, prefix: str) -> dict[str, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out_dir))
    acc.Reload()
    return {tag: acc.Scalars(tag)[-1].value for tag in acc.Tags()["scalars"] if tag.startswith(prefix)}


def test_compile_gives_the_first_update_of_eager(tmp_path):
    """One rollout and one update (4 epochs x 4 minibatches), fp32, eager against torch.compile
    (inductor told to draw random numbers as eager does): every weight within 2e-5 after it."""
    import torch._inductor.config as inductor_config

    one = dict(total_timesteps=2 * 64, amp="off")
    train(tiny(tmp_path / "eager", **one))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(inductor_config, "fallback_random", True)
        train(tiny(tmp_path / "compiled", compile=True, **one))
    eager, compiled = saved(tmp_path / "eager"), saved(tmp_path / "compiled")
    start = AtariAgent(4).state_dict()  # shapes only
    for name in start:
        torch.testing.assert_close(compiled["agent"][name], eager["agent"][name], rtol=0, atol=2e-5, msg=name)
    assert compiled["episodes"] == eager["episodes"]
