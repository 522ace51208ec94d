"""Every environment an RL user brings, in the image on the CPU: gymnasium's extras complete (the
matrix's [gymnasium]), its torch wrappers, RecordVideo for CartPole and Pong, MuJoCo stepping and
rendering rgb_array frames through EGL (Mesa's llvmpipe here), Box2D, and pip check saying nothing
but the one documented override. One container runs it all; each test reads its record."""

from __future__ import annotations

import json

import pytest

from pipeline.containers import run_in_image

pytestmark = pytest.mark.image

OUT = "/tmp/out"

SCRIPT = r"""
import json, os, subprocess, sys, time
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path

from packaging.requirements import Requirement

out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
extras = json.loads(sys.argv[2])
removed = set(json.loads(sys.argv[3]))
record = {}

# gymnasium's requirements for each claimed extra, installed at versions that satisfy them
missing = []
for text in requires("gymnasium"):
    req = Requirement(text)
    wanted = [e for e in extras if req.marker is not None and req.marker.evaluate({"extra": e})]
    if not wanted or req.name in removed:
        continue
    try:
        have = version(req.name)
    except PackageNotFoundError:
        missing.append(f"{text} (extra {wanted[0]}): not installed")
        continue
    if have not in req.specifier:
        missing.append(f"{text}: {have} installed")
record["missing"] = missing

import gymnasium as gym
import torch
from gymnasium.wrappers import NumpyToTorch, RecordVideo
from gymnasium.wrappers.vector import NumpyToTorch as VectorNumpyToTorch

obs, _ = NumpyToTorch(gym.make("CartPole-v1")).reset(seed=0)
vobs, _ = VectorNumpyToTorch(gym.make_vec("CartPole-v1", num_envs=2)).reset(seed=0)
record["numpy_to_torch"] = {"single": [type(obs).__name__, list(obs.shape)], "vector": [type(vobs).__name__, list(vobs.shape)]}


def video(env_id, folder, steps, **kwargs):
    env = RecordVideo(gym.make(env_id, render_mode="rgb_array", max_episode_steps=steps, **kwargs), str(out / folder),
                      episode_trigger=lambda episode: episode == 0, disable_logger=True)
    env.reset(seed=0)
    done = False
    while not done:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        done = terminated or truncated
    env.close()
    return sorted(p.name for p in (out / folder).glob("*.mp4"))


import ale_py
gym.register_envs(ale_py)
record["videos"] = {"cartpole": video("CartPole-v1", "cartpole", 200), "pong": video("ALE/Pong-v5", "pong", 300)}

mujoco = {}
for env_id in ("HalfCheetah-v5", "Humanoid-v5"):
    env = gym.make(env_id, render_mode="rgb_array")
    env.reset(seed=0)
    start = time.perf_counter()
    for _ in range(1000):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    sps = 1000 / (time.perf_counter() - start)
    start = time.perf_counter()
    frame = env.render()
    first = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(10):
        frame = env.render()
    mujoco[env_id] = {"shape": list(frame.shape), "dtype": str(frame.dtype), "nonblank": int(frame.std() > 1), "steps_per_s": round(sps),
                      "first_render_s": round(first, 3), "render_ms": round((time.perf_counter() - start) * 100, 1)}
    from OpenGL import GL  # the renderer's context is current after render()
    mujoco["gl_renderer"] = (GL.glGetString(GL.GL_RENDERER) or b"").decode()
    env.close()
mujoco["MUJOCO_GL"] = os.environ.get("MUJOCO_GL")
record["mujoco"] = mujoco

box2d = {}
for env_id in ("LunarLander-v3", "BipedalWalker-v3", "CarRacing-v3"):
    env = gym.make(env_id)
    env.reset(seed=0)
    for _ in range(50):
        env.step(env.action_space.sample())
    box2d[env_id] = "stepped"
    env.close()
record["box2d"] = box2d

check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
record["pip_check"] = [line for line in check.stdout.splitlines() if line.strip()]
(out / "record.json").write_text(json.dumps(record, indent=1))
print(json.dumps(record))
"""


@pytest.fixture(scope="module")
def environments(docker, image, variant):
    removed = [o.requirement.split(";")[0].strip() for o in variant.overrides if "never" in o.requirement]
    command = ["python", "-c", SCRIPT, OUT, json.dumps(list(variant.extras())), json.dumps(removed)]
    step = run_in_image(docker, image, command, timeout_s=600, fetch=OUT, network=False)
    assert step.exit_code == 0, step.stdout[-3000:] + step.stderr[-3000:]
    return step, json.loads(step.files["record.json"])


def test_every_requirement_of_the_claimed_extras_is_installed(environments, variant):
    _, record = environments
    assert set(variant.extras()) >= {"torch", "mujoco", "box2d", "other", "atari", "classic-control"}
    assert record["missing"] == []


def test_numpy_to_torch_gives_tensors_single_and_vector(environments):
    _, record = environments
    assert record["numpy_to_torch"] == {"single": ["Tensor", [4]], "vector": ["Tensor", [2, 4]]}


@pytest.mark.parametrize("game", ["cartpole", "pong"])
def test_record_video_writes_a_non_empty_mp4(environments, game):
    step, record = environments
    (name,) = record["videos"][game]
    data = step.files[f"{game}/{name}"]
    assert len(data) > 1000 and data[4:8] == b"ftyp"  # an MP4's first box


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Humanoid-v5"])
def test_mujoco_steps_and_renders_an_rgb_frame_on_the_cpu(environments, env_id):
    _, record = environments
    found = record["mujoco"][env_id]
    assert found["shape"] == [480, 480, 3] and found["dtype"] == "uint8" and found["nonblank"] == 1
    assert found["steps_per_s"] > 100
    assert record["mujoco"]["MUJOCO_GL"] == "egl" and "llvmpipe" in record["mujoco"]["gl_renderer"]


def test_box2d_environments_step(environments):
    _, record = environments
    assert record["box2d"] == {"LunarLander-v3": "stepped", "BipedalWalker-v3": "stepped", "CarRacing-v3": "stepped"}


def test_pip_check_reports_only_the_documented_override(environments, variant):
    _, record = environments
    expected = [o for o in variant.overrides if o.package]
    assert len(record["pip_check"]) == len(expected), record["pip_check"]
    for line, override in zip(sorted(record["pip_check"]), sorted(expected, key=lambda o: o.package), strict=True):
        assert line.startswith(f"{override.package} ") and f"has requirement {override.conflict}, but you have" in line
