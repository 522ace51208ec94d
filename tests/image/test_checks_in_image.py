"""The smoke suite and the PPO benchmark as a user runs them inside the image."""

from __future__ import annotations

import json

import pytest

from pipeline.validate import ppo_command, run_step, smoke_command

pytestmark = pytest.mark.image


@pytest.fixture(scope="module")
def smoke_required_gpu(docker, image, variant):
    """`python -m smoke --require-gpu` on a host without a GPU."""
    return run_step(docker, image, "smoke --require-gpu", smoke_command(variant, gpu=True), gpus=0, timeout_s=900)


def test_require_gpu_fails_without_a_gpu(smoke_required_gpu):
    assert smoke_required_gpu.exit_code == 1


def test_require_gpu_turns_every_gpu_check_into_a_failure(smoke_required_gpu):
    report = json.loads(smoke_required_gpu.files["smoke.json"])
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert report["ok"] is False and report["require_gpu"] is True
    assert "skip" not in statuses.values()
    for name in ("gpu", "cudnn", "amp", "driver"):
        assert statuses[name] == "fail", name
    assert statuses["versions"] == "pass"


def test_gymnasium_backend_solves_cartpole_and_writes_its_outputs(docker, image, variant):
    """The path users take: gymnasium vector envs (CleanRL's defaults), on the CPU."""
    command = ppo_command(variant, "cpu", require_gpu=False)
    command[command.index("--backend") + 1] = "gymnasium"
    command[command.index("--total-timesteps") + 1] = "500000"
    step = run_step(docker, image, "PPO gymnasium backend", command, gpus=0, timeout_s=900)
    result = json.loads(step.files["ppo/result.json"])
    assert step.exit_code == 0, result
    assert result["solved"] and result["backend"] == "gymnasium" and result["final_mean_return"] >= 475
    assert step.files["ppo/learning_curve.png"][:8] == b"\x89PNG\r\n\x1a\n"
    assert any(name.startswith("ppo/events.out.tfevents") for name in step.files)


def _pip_fails(docker, image, *args, env=None) -> str:
    """Run `pip install --no-index ARGS` in a container (no network); it must fail. Its output."""
    container = docker.containers.run(
        image, ["pip", "install", "--no-index", *args], network_disabled=True, environment=env or {},
        detach=True, labels={"io.proven-torch.role": "test"},
    )  # fmt: skip
    try:
        assert container.wait(timeout=120)["StatusCode"] != 0
        return container.logs(stdout=True, stderr=True).decode(errors="replace")
    finally:
        container.remove(force=True, v=True)


def test_pip_in_a_container_cannot_replace_torch(docker, image, variant):
    """The image's pip constraint holds torch at the pin (no network needed to see it)."""
    output = _pip_fails(docker, image, "torch==0.0.1")
    assert f"(constraint) torch=={variant.torch}" in output


@pytest.fixture(scope="module")
def unconstrained_pip_output(docker, image) -> str:
    """pip asked for a torch no index has, with the image's constraint lifted (PIP_CONSTRAINT="")."""
    return _pip_fails(docker, image, "torch==0.0.1", env={"PIP_CONSTRAINT": ""})


def test_the_constraint_can_be_lifted_on_purpose(unconstrained_pip_output):
    assert "(constraint)" not in unconstrained_pip_output
    assert "No matching distribution found for torch==0.0.1" in unconstrained_pip_output


def test_pip_has_a_writable_cache(unconstrained_pip_output):
    assert "is not owned or is not writable" not in unconstrained_pip_output
