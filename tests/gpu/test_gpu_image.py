"""On a GPU host (the self-hosted runner): the image proves itself with GPUs required.

Run with `pytest -m gpu` where `nvidia-smi` works and Docker has the NVIDIA
Container Toolkit. Elsewhere these tests are skipped with that reason; CI on
the build machines deselects the group (`-m "not gpu"`), it never runs them
as silent skips.
"""

from __future__ import annotations

import json

import pytest

from pipeline.containers import run_in_image
from pipeline.validation.gate import proof_command

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu_proof(docker, image):
    return run_in_image(
        docker, image, proof_command(require_gpu=True), timeout_s=1800, gpus=1, shm_size="2g", fetch="/tmp/validation"
    )


def test_proof_with_gpu_required_passes(gpu_proof):
    record = json.loads(gpu_proof.files["proof.json"])
    assert gpu_proof.exit_code == 0, record["failures"]
    assert record["gpu"] is True and record["verdict"].startswith("proof: PROVEN on ")


def test_no_gpu_check_was_skipped(gpu_proof):
    smoke = json.loads(gpu_proof.files["smoke.json"])
    assert all(c["status"] == "pass" for c in smoke["checks"]), [c for c in smoke["checks"] if c["status"] != "pass"]
    assert smoke["facts"]["gpu_count"] >= 1


def test_ppo_gate_solved_on_the_gpu(gpu_proof):
    result = json.loads(gpu_proof.files["ppo/result.json"])
    assert result["solved"] and result["device"].startswith("cuda")


# --- ppo_bench across two GPUs (NCCL) ---------------------------------------------------


def _two_gpus(docker, image) -> None:
    done = run_in_image(docker, image, ["python", "-c", "import torch; print(torch.cuda.device_count())"], timeout_s=120, gpus=1)
    if int(done.stdout.strip().splitlines()[-1]) < 2:
        pytest.skip("needs two GPUs: NCCL across ranks")


@pytest.mark.parametrize("options", [[], ["--cuda-graphs"], ["--amp", "fp16"]], ids=["plain", "cuda-graphs", "amp-fp16"])
def test_two_ranks_on_two_gpus_stay_identical(docker, image, options):
    """Each rank on its own GPU, NCCL between them: both finish with identical weights (and equal loss scales)."""
    _two_gpus(docker, image)
    command = ["torchrun", "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", "29512", "-m", "ppo_bench"]
    command += ["--device", "cuda", "--num-envs", "1024", "--num-steps", "16", "--target-kl", "0.01"]
    command += ["--total-timesteps", str(2 * 1024 * 16 * 20), "--out-dir", "/tmp/validation", "--no-progress", *options]
    done = run_in_image(docker, image, command, timeout_s=900, gpus=1, shm_size="2g", fetch="/tmp/validation")
    assert done.exit_code == 0, done.stdout[-3000:] + done.stderr[-3000:]
    import io

    import torch

    ckpts = [torch.load(io.BytesIO(done.files[f"checkpoint-rank{r}.pt"]), map_location="cpu", weights_only=False) for r in (0, 1)]
    assert [c["device"] for c in ckpts] == ["cuda:0", "cuda:1"]
    assert ckpts[0]["update_epochs"] == ckpts[1]["update_epochs"] and ckpts[0]["loss_scale"] == ckpts[1]["loss_scale"]
    for key, value in ckpts[0]["agent"].items():
        assert torch.equal(value, ckpts[1]["agent"][key]), key


# --- MuJoCo's frames from the driver's EGL --------------------------------------------------


def test_mujoco_renders_through_the_drivers_egl(docker, image):
    """The image asks for the `graphics` driver capability, so the Container Toolkit mounts the driver's
    EGL, and glvnd takes it ahead of Mesa's llvmpipe (what a host without a GPU renders with)."""
    script = (
        "import gymnasium as gym\n"
        "from OpenGL import GL\n"
        "env = gym.make('HalfCheetah-v5', render_mode='rgb_array')\n"
        "env.reset(seed=0)\n"
        "frame = env.render()\n"
        "print(GL.glGetString(GL.GL_RENDERER).decode(), '|', frame.shape, frame.std() > 1)\n"
        "env.close()\n"
    )
    done = run_in_image(docker, image, ["python", "-c", script], timeout_s=300, gpus=1)
    assert done.exit_code == 0, done.stdout[-2000:] + done.stderr[-2000:]
    renderer, shape = done.stdout.strip().splitlines()[-1].split(" | ")
    assert "llvmpipe" not in renderer and "NVIDIA" in renderer.upper(), renderer
    assert shape == "(480, 480, 3) True"
