"""The libraries RL users add to the image work: `pip install stable-baselines3[extra]` (SB3's own
install line; it brings opencv-python, whose Qt needs GLib from the system) as the default user,
kept to the image's versions, then `import cv2` and a PPO step over SB3's SubprocVecEnv, whose workers
are new Python processes (OpenCV's loader, when its native import fails, leaves its own folder on
sys.path, and the workers then import cv2's `typing` package for the standard one). Needs PyPI, reached
through the host's proxy CA where there is one (BUILD_CA_CERT, as the build's pip)."""

from __future__ import annotations

import json

import pytest

from tests.image.conftest import ca_cert
from tests.image.service_helpers import run_command

pytestmark = [pytest.mark.image, pytest.mark.network]

CA_IN_CONTAINER = "/run/proven-torch-test/ca.pem"

TRAIN = r"""
import json, sys
from importlib.metadata import version

import cv2
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import SubprocVecEnv

def versions(path):
    return dict(line.strip().split("==", 1) for line in open(path) if "==" in line)


if __name__ == "__main__":  # SubprocVecEnv's workers start from a fresh Python (forkserver)
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0, vec_env_cls=SubprocVecEnv)
    model = PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu").learn(total_timesteps=128)
    env.close()
    before, after = versions("/tmp/before.txt"), versions("/tmp/after.txt")
    print("RESULT " + json.dumps({
        "changed": sorted(f"{name} {have} -> {after.get(name)}" for name, have in before.items() if after.get(name) != have),
        "cv2": cv2.__version__, "opencv-python": version("opencv-python"), "timesteps": model.num_timesteps,
        "cv2_folder_on_sys_path": any(p.rstrip("/").endswith("/cv2") for p in sys.path),
    }))
"""

# Every package the image has, at its version, constrains the install: only what SB3 adds is new.
INSTALL = (
    "set -euo pipefail; python -m pip list --format=freeze > /tmp/before.txt"
    ' && python -m pip install -q -c /tmp/before.txt "stable-baselines3[extra]"'
    ' && python -m pip list --format=freeze > /tmp/after.txt && python -c "$TRAIN"'
)


@pytest.fixture(scope="module")
def trained(docker, image) -> tuple[dict, str]:
    ca = ca_cert()
    kwargs: dict = {"environment": {"TRAIN": TRAIN}}
    if ca is not None:
        kwargs["volumes"] = {str(ca): {"bind": CA_IN_CONTAINER, "mode": "ro"}}
        kwargs["environment"]["PIP_CERT"] = CA_IN_CONTAINER
    code, logs = run_command(docker, image, ["bash", "-c", INSTALL], timeout=900, **kwargs)
    lines = [line for line in logs.splitlines() if line.startswith("RESULT ")]
    assert code == 0 and lines, logs[-4000:]
    return json.loads(lines[-1].removeprefix("RESULT ")), logs


def test_opencv_python_imports_after_sb3s_install_line(trained):
    result, _ = trained
    assert result["opencv-python"] and result["cv2"]


def test_a_subproc_vec_env_trains_a_ppo_step(trained):
    result, _ = trained
    assert result["timesteps"] >= 128


def test_opencvs_loader_leaves_sys_path_as_it_was(trained):
    result, _ = trained
    assert result["cv2_folder_on_sys_path"] is False


def test_the_install_kept_every_package_the_image_had_at_its_version(trained):
    result, _ = trained
    assert result["changed"] == []
