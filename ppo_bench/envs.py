"""Vectorised environments behind one small interface.

Both backends reset a finished sub-environment in the SAME step that ended it
(gymnasium's `AutoresetMode.SAME_STEP`): `step()` returns the first observation
of the new episode, and the observation the old episode ended in comes back
separately as `final_obs` (needed to bootstrap the value of a truncated episode).
So every transition the trainer stores is a real one. Under gymnasium 1.x's
default (NEXT_STEP) the step after a done would instead be a reset step whose
action is ignored, and `infos["final_info"]` no longer exists, which is why
CleanRL's ppo.py records no episode returns on gymnasium 1.x.

* `TorchCartPole`: CartPole-v1 as tensor arithmetic on the training device,
  thousands of environments per call, no host round trip per step.
* `GymVectorEnv`: any gymnasium environment id through `gymnasium.vector.SyncVectorEnv`
  (discrete or Box actions), wrapped in `RecordEpisodeStatistics`.
* `AtariEnv`: ALE games through ale-py's `AtariVectorEnv`, which steps, preprocesses
  (84x84 grey, max-pooled frame skip 4, 4 stacked frames, up to 30 no-ops and FIRE on
  reset) and resets the games in C++ threads. `ALE/<Game>-v5` plays the game as gymnasium
  registers that id (ale-py's v5: sticky actions with probability 0.25); `envpool/<Game>-v5`
  plays it as EnvPool's `<Game>-v5` does (no sticky actions), the settings CleanRL's
  ppo_atari_envpool.py trains with.

Each class says which ids it plays (`check_id`, the one place an id is validated; config.py
calls it through the backend table, ppo_bench/backends.py), the default target of an id
(`reward_threshold`) and what it was built with (`settings()`, written into result.json).
"""

from __future__ import annotations

import functools
import math
import pickle
from typing import NamedTuple

import numpy as np
import torch

from ppo_bench.errors import ConfigError


class StepOut(NamedTuple):
    """What one vectorised step returns; every tensor has the batch dimension first."""

    obs: torch.Tensor  # next observation; already the reset observation where the episode ended
    reward: torch.Tensor  # float32
    terminated: torch.Tensor  # bool: the MDP ended (pole fell, cart left the track)
    truncated: torch.Tensor  # bool: the time limit cut the episode off
    final_obs: torch.Tensor  # the observation the episode ended in (equals `obs` where not done)
    episode_return: torch.Tensor  # float32: return of the episode that ended here (0 where not done)
    episode_length: torch.Tensor  # int32: its length in steps (0 where not done)


class TorchCartPole:
    """CartPole-v1 for `num_envs` environments at once, in torch, on `device`.

    Same physics, reward, termination and reset rule as gymnasium's CartPole-v1
    (`gymnasium/envs/classic_control/cartpole.py`, euler integrator) plus its
    `TimeLimit(max_episode_steps=500)`: reward 1 every step including the one
    that terminates, terminated when |x| > 2.4 or |theta| > 12 degrees,
    truncated when the episode reaches 500 steps, reset state uniform in
    [-0.05, 0.05) for all four state variables.

    Randomness comes from torch's default generator of `device` (seed it with
    `torch.manual_seed`), which also keeps `step` capturable in a CUDA graph.
    `dtype` is the state's precision: float32 is fast, float64 is what
    gymnasium computes in (used by the step-for-step tests). Observations are
    always float32, like gymnasium's.
    """

    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    total_mass = masspole + masscart
    length = 0.5  # half the pole's length
    polemass_length = masspole * length
    force_mag = 10.0
    tau = 0.02  # seconds between state updates
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4
    reset_low, reset_high = -0.05, 0.05

    env_id = "CartPole-v1"  # the one id it plays
    target_return = 475.0  # gymnasium's reward_threshold for CartPole-v1

    single_observation_shape = (4,)
    observation_dtype = torch.float32
    num_actions = 2
    continuous = False
    resumable = True  # state_dict() holds everything a resumed run needs
    steps_on_device = True  # a rollout can be compiled and graphed whole, environment included

    @classmethod
    def check_id(cls, env_id: str) -> None:
        if env_id != cls.env_id:
            raise ConfigError(
                f"--backend torch implements {cls.env_id} only, not {env_id!r}; use --backend gymnasium for other environments"
            )

    @classmethod
    def reward_threshold(cls, env_id: str) -> float | None:
        return cls.target_return

    @classmethod
    def open(cls, env_id: str, num_envs: int, seed: int, device: torch.device | str) -> TorchCartPole:
        """The environments of one process (the torch generator of `device` seeds them)."""
        return cls(num_envs, device)

    def settings(self) -> dict:
        return {"env_id": self.env_id, "max_episode_steps": self.max_episode_steps}

    def __init__(
        self, num_envs: int, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32, max_episode_steps: int = 500
    ):
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.dtype = dtype
        self.max_episode_steps = max_episode_steps
        self.state = torch.zeros((num_envs, 4), device=self.device, dtype=dtype)
        self.steps = torch.zeros(num_envs, device=self.device, dtype=torch.int32)
        self._reward = torch.ones(num_envs, device=self.device, dtype=torch.float32)
        self._force_over_mass = torch.tensor(
            [-self.force_mag / self.total_mass, self.force_mag / self.total_mass], device=self.device, dtype=dtype
        )
        self._limits = torch.tensor([self.x_threshold, self.theta_threshold_radians], device=self.device, dtype=dtype)

    def _random_states(self) -> torch.Tensor:
        return torch.empty((self.num_envs, 4), device=self.device, dtype=self.dtype).uniform_(self.reset_low, self.reset_high)

    def reset(self) -> torch.Tensor:
        """Start a new episode in every environment; returns the observations."""
        self.state.copy_(self._random_states())
        self.steps.zero_()
        return self.state.float()

    def step(self, action: torch.Tensor) -> StepOut:
        """Advance every environment by one step (action 1 pushes right, 0 left).

        Written for few tensor operations (each costs microseconds of overhead on a
        CPU), with gymnasium's equations regrouped around constants. The returned
        tensors are only valid until the next call (`obs` may be the state itself).
        """
        x_dot, theta, theta_dot = self.state[:, 1], self.state[:, 2], self.state[:, 3]
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        # temp = (force + polemass_length * theta_dot**2 * sintheta) / total_mass
        force_over_mass = self._force_over_mass[action.long()]  # action 1: +force_mag, 0: -force_mag
        temp = force_over_mass + (self.polemass_length / self.total_mass) * (theta_dot * theta_dot) * sintheta
        # thetaacc = (g sin - cos temp) / (length * (4/3 - masspole cos^2 / total_mass))
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * 4.0 / 3.0 - (self.length * self.masspole / self.total_mass) * (costheta * costheta)
        )
        xacc = temp - (self.polemass_length / self.total_mass) * thetaacc * costheta
        # Euler step of (x, x_dot, theta, theta_dot) with derivatives (x_dot, xacc, theta_dot, thetaacc).
        new_state = torch.add(self.state, torch.stack((x_dot, xacc, theta_dot, thetaacc), dim=1), alpha=self.tau)

        terminated = (new_state[:, 0::2].abs() > self._limits).any(dim=1)  # |x| > 2.4 or |theta| > 12 deg
        self.steps += 1
        truncated = self.steps >= self.max_episode_steps
        done = terminated | truncated

        # Same-step autoreset: finished environments start their next episode now.
        torch.where(done.unsqueeze(1), self._random_states(), new_state, out=self.state)
        episode_length = torch.where(done, self.steps, 0)
        self.steps.masked_fill_(done, 0)
        return StepOut(
            obs=self.state.float(),
            reward=self._reward,  # CartPole pays 1 for every step, the terminating one included
            terminated=terminated,
            truncated=truncated,
            final_obs=new_state.float(),
            episode_return=episode_length.float(),  # return == length at reward 1 per step
            episode_length=episode_length,
        )

    def state_dict(self) -> dict:
        return {"state": self.state.clone(), "steps": self.steps.clone()}

    def load_state_dict(self, sd: dict) -> None:
        self.state.copy_(sd["state"])
        self.steps.copy_(sd["steps"])

    def close(self) -> None:
        pass


class GymVectorEnv:
    """gymnasium environments (SyncVectorEnv, same-step autoreset) as torch tensors.

    Episode returns come from gymnasium's own `wrappers.vector.RecordEpisodeStatistics`
    (`infos["episode"]`, masked by `infos["_episode"]`). Box actions are clipped to
    the action space before they reach the environment (the trainer keeps the
    unclipped sample for its log-probabilities).
    """

    observation_dtype = torch.float32
    resumable = True
    steps_on_device = False

    @classmethod
    def check_id(cls, env_id: str) -> None:
        cls._spec(env_id)

    @classmethod
    def reward_threshold(cls, env_id: str) -> float | None:
        return cls._spec(env_id).reward_threshold

    @classmethod
    def open(cls, env_id: str, num_envs: int, seed: int, device: torch.device | str) -> GymVectorEnv:
        return cls(env_id, num_envs, seed, device)

    @staticmethod
    def _spec(env_id: str):
        import gymnasium as gym

        try:
            return gym.spec(env_id)
        except gym.error.Error as exc:
            raise ConfigError(f"--env-id {env_id!r} is not a registered gymnasium environment ({exc})") from exc

    def __init__(self, env_id: str, num_envs: int, seed: int, device: torch.device | str = "cpu"):
        import gymnasium as gym
        from gymnasium.vector import AutoresetMode, SyncVectorEnv
        from gymnasium.wrappers.vector import RecordEpisodeStatistics

        self.env_id = env_id
        self._vec = SyncVectorEnv([lambda: gym.make(env_id) for _ in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP)
        self.envs = RecordEpisodeStatistics(self._vec)
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.seed = seed
        obs_space, act_space = self._vec.single_observation_space, self._vec.single_action_space
        if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
            raise ConfigError(f"{env_id}: only flat Box observations are supported, got {obs_space}")
        self.single_observation_shape = tuple(obs_space.shape)
        if isinstance(act_space, gym.spaces.Discrete):
            self.continuous, self.num_actions = False, int(act_space.n)
        elif isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
            self.continuous, self.num_actions = True, int(act_space.shape[0])
            self._low, self._high = act_space.low, act_space.high
        else:
            raise ConfigError(f"{env_id}: only Discrete or 1-D Box actions are supported, got {act_space}")

    def settings(self) -> dict:
        return {"env_id": self.env_id}

    def _to_torch(self, array: np.ndarray, dtype=torch.float32) -> torch.Tensor:
        return torch.as_tensor(np.asarray(array), dtype=dtype).to(self.device)

    def reset(self) -> torch.Tensor:
        obs, _ = self.envs.reset(seed=self.seed)  # sub-environment i gets seed + i
        return self._to_torch(obs)

    def step(self, action: torch.Tensor) -> StepOut:
        act = action.cpu().numpy()
        act = np.clip(act, self._low, self._high) if self.continuous else act.astype(np.int64)
        obs, reward, terminated, truncated, infos = self.envs.step(act)
        done = terminated | truncated
        final_obs = obs.copy()
        if "_final_obs" in infos:
            for i in np.flatnonzero(infos["_final_obs"]):
                final_obs[i] = infos["final_obs"][i]
        ep_ret = np.zeros(self.num_envs, dtype=np.float32)
        ep_len = np.zeros(self.num_envs, dtype=np.int32)
        if "_episode" in infos:
            mask = infos["_episode"]
            ep_ret[mask] = infos["episode"]["r"][mask]
            ep_len[mask] = infos["episode"]["l"][mask]
        assert (ep_len > 0).sum() == done.sum(), "every finished episode must report its return"
        return StepOut(
            obs=self._to_torch(obs),
            reward=self._to_torch(reward),
            terminated=self._to_torch(terminated, torch.bool),
            truncated=self._to_torch(truncated, torch.bool),
            final_obs=self._to_torch(final_obs),
            episode_return=self._to_torch(ep_ret),
            episode_length=self._to_torch(ep_len, torch.int32),
        )

    def state_dict(self) -> dict:
        """Everything a resumed run needs to continue these episodes exactly."""
        return {
            "sub_envs": pickle.dumps(self._vec.envs),
            "episode_returns": self.envs.episode_returns.copy(),
            "episode_lengths": self.envs.episode_lengths.copy(),
        }

    def load_state_dict(self, sd: dict) -> None:
        self._vec.envs = pickle.loads(sd["sub_envs"])  # noqa: S301 - our own checkpoint
        self.envs.episode_returns = sd["episode_returns"].copy()
        self.envs.episode_lengths = sd["episode_lengths"].copy()

    def close(self) -> None:
        self.envs.close()


ALE = "ALE/"  # ALE/<Game>-v5: the game as gymnasium registers the id (ale-py's v5)
ENVPOOL = "envpool/"  # envpool/<Game>-v5: the game with EnvPool's settings (CleanRL's ppo_atari_envpool.py)


class AtariGame(NamedTuple):
    """What an Atari id means: the ROM and the emulator settings it is played with."""

    env_id: str
    rom: str  # ale-py's ROM name: breakout, montezuma_revenge
    repeat_action_probability: float  # sticky actions: the chance the emulator repeats the previous action
    full_action_space: bool
    max_num_frames_per_episode: int
    defined_by: str  # whose definition of the id these settings are


def atari_game(env_id: str) -> AtariGame:
    """The game and settings of `ALE/<Game>-v5` (as gymnasium registers the id: ale-py's v5, sticky
    actions 0.25) or `envpool/<Game>-v5` (the same game as EnvPool's `<Game>-v5`: no sticky actions,
    what CleanRL's ppo_atari_envpool.py trains on); ConfigError for anything else."""
    import ale_py  # noqa: F401  registers the ALE/ ids with gymnasium
    import gymnasium as gym

    envpool = env_id.startswith(ENVPOOL)
    if envpool and not env_id.endswith("-v5"):
        raise ConfigError(f"--env-id {env_id!r}: {ENVPOOL} names EnvPool's -v5 settings only ({ENVPOOL}Breakout-v5)")
    ale_id = ALE + env_id.removeprefix(ENVPOOL) if envpool else env_id
    if not ale_id.startswith(ALE):
        raise ConfigError(
            f"--backend atari plays ALE games (--env-id ALE/Breakout-v5, or envpool/Breakout-v5 for EnvPool's settings "
            f"without sticky actions), not {env_id!r}"
        )
    try:
        spec = gym.spec(ale_id)
    except gym.error.Error as exc:
        raise ConfigError(
            f"--env-id {env_id!r}: gymnasium has no {ale_id} ({exc}); ale-py registers ALE/<Game>-v5 for each of its "
            "ROMs (ale_py.roms.get_all_rom_ids() lists them)"
        ) from exc
    kwargs = spec.kwargs
    if kwargs.get("frameskip", 4) != 4 or kwargs.get("obs_type", "rgb") != "rgb":
        raise ConfigError(f"--env-id {env_id!r}: the atari backend skips 4 frames per step, {ale_id} is defined otherwise")
    common = dict(
        env_id=env_id,
        rom=kwargs["game"],
        full_action_space=bool(kwargs.get("full_action_space", False)),
        max_num_frames_per_episode=int(kwargs.get("max_num_frames_per_episode", 108_000)),
    )
    if envpool:  # EnvPool's Atari defaults differ from gymnasium's v5 in one setting that changes the game
        return AtariGame(**common, repeat_action_probability=0.0, defined_by=f"EnvPool's {spec.name}-v5 (no sticky actions)")
    return AtariGame(
        **common,
        repeat_action_probability=float(kwargs["repeat_action_probability"]),
        defined_by=f"gymnasium's {ale_id} (ale-py {ale_py.__version__})",
    )


class AtariEnv:
    """ALE games (`ALE/Breakout-v5`, `envpool/Breakout-v5` ...) as ale-py's `AtariVectorEnv`,
    same-step autoreset, with the settings the id defines (`atari_game`).

    Observations are uint8 (num_envs, 4, 84, 84) stacks, kept as uint8 on the device (the
    policy scales them). As CleanRL trains Atari: a lost life ends the episode for the
    learner (`terminated`) while the game plays on, and the learner sees rewards clipped to
    their sign. The episodes this reports (`episode_return`, `episode_length`) are whole
    games with their unclipped score, which is what Atari results quote; they end at game
    over or at the 108,000-frame limit (`truncated`).

    A checkpoint keeps the trainer exact but not the games: ALE's emulators are not saved,
    so `--resume` starts new games (and says so).
    """

    observation_dtype = torch.uint8
    continuous = False
    resumable = False
    steps_on_device = False

    @classmethod
    def check_id(cls, env_id: str) -> None:
        atari_game(env_id)

    @classmethod
    def reward_threshold(cls, env_id: str) -> float | None:
        return None  # ALE games have none

    @classmethod
    def open(cls, env_id: str, num_envs: int, seed: int, device: torch.device | str) -> AtariEnv:
        return cls(env_id, num_envs, seed, device)

    def __init__(self, env_id: str, num_envs: int, seed: int, device: torch.device | str = "cpu"):
        from ale_py.vector_env import AtariVectorEnv

        self.game = atari_game(env_id)
        self.repeat_action_probability = self.game.repeat_action_probability
        self._vec = AtariVectorEnv(
            self.game.rom,
            num_envs,
            repeat_action_probability=self.game.repeat_action_probability,
            full_action_space=self.game.full_action_space,
            max_num_frames_per_episode=self.game.max_num_frames_per_episode,
            autoreset_mode="SameStep",
            reward_clipping=False,
            life_loss_info=True,
            episodic_life=False,
        )
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.seed = seed
        self.single_observation_shape = tuple(self._vec.single_observation_space.shape)
        self.num_actions = int(self._vec.single_action_space.n)
        self._lives = np.zeros(num_envs, dtype=np.int64)
        self._game_return = np.zeros(num_envs, dtype=np.float64)
        self._game_length = np.zeros(num_envs, dtype=np.int64)

    def settings(self) -> dict:
        return self.game._asdict()

    def reset(self) -> torch.Tensor:
        obs, info = self._vec.reset(seed=self.seed)
        self._lives[:] = info["lives"]
        self._game_return[:] = 0
        self._game_length[:] = 0
        return torch.from_numpy(obs).to(self.device)

    def step(self, action: torch.Tensor) -> StepOut:
        obs, reward, terminated, truncated, info = self._vec.step(action.cpu().numpy().astype(np.int64))
        lives = info["lives"]
        self._game_return += reward
        self._game_length += 1
        # A terminated step either lost a life (the game plays on, fewer lives) or ended the game (which
        # the same step restarted with full lives; games without lives report 0 throughout).
        game_over = (terminated & ~(lives < self._lives)) | truncated
        self._lives[:] = lives
        ep_ret = np.where(game_over, self._game_return, 0.0).astype(np.float32)
        ep_len = np.where(game_over, self._game_length, 0).astype(np.int32)
        self._game_return[game_over] = 0
        self._game_length[game_over] = 0
        done = terminated | truncated
        final_obs = np.where(done[:, None, None, None], info["final_obs"], obs) if done.any() else obs
        to = functools.partial(torch.as_tensor, device=self.device)
        return StepOut(
            obs=to(obs),
            reward=to(np.sign(reward), dtype=torch.float32),
            terminated=to(terminated),
            truncated=to(truncated),
            final_obs=to(final_obs),
            episode_return=to(ep_ret),
            episode_length=to(ep_len),
        )

    def state_dict(self) -> dict:
        return {"game": self.game.rom}

    def load_state_dict(self, sd: dict) -> None:
        pass  # the trainer resets the games (resumable = False)

    def close(self) -> None:
        self._vec.close()
