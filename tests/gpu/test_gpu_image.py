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
from pipeline.validate import proof_command

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
