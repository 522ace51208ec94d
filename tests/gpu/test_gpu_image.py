"""On a GPU host (the self-hosted runner): the image proves itself with GPUs required.

Run with `pytest -m gpu` where `nvidia-smi` works and Docker has the NVIDIA
Container Toolkit. Elsewhere these tests are skipped with that reason; CI on
the build machines deselects the group (`-m "not gpu"`), it never runs them
as silent skips.
"""

from __future__ import annotations

import json

import docker.types
import pytest

from pipeline.validate import ppo_command, run_step, smoke_command

pytestmark = pytest.mark.gpu

GPUS = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]


def test_smoke_with_gpu_required_passes(docker, image, variant):
    step = run_step(docker, image, "smoke --require-gpu", smoke_command(variant, gpu=True), gpus=1, timeout_s=900)
    report = json.loads(step.files["smoke.json"])
    assert step.exit_code == 0, [c for c in report["checks"] if c["status"] != "pass"]
    assert all(c["status"] == "pass" for c in report["checks"]), "a GPU check was skipped on a GPU host"
    assert report["facts"]["gpu_count"] >= 1


def test_ppo_gate_solves_on_the_gpu(docker, image, variant):
    step = run_step(docker, image, "PPO on cuda", ppo_command(variant, "cuda", require_gpu=True), gpus=1, timeout_s=900)
    result = json.loads(step.files["ppo/result.json"])
    assert step.exit_code == 0 and result["solved"] and result["device"].startswith("cuda")

