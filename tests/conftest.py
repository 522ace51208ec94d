"""Test groups are split by marker: unit (no Docker), image (Docker, no GPU), gpu.

Image tests need a Docker daemon. Where Docker is required (CI=true or
REQUIRE_DOCKER=1) an unreachable daemon fails them instead of skipping them, so
a CI run can never turn the image group into silent skips. Likewise where a GPU is
required (REQUIRE_GPU=1: the GPU workflow, the release's GPU job) a host with no
GPU visible fails the gpu group with one line instead of skipping it.
"""

from __future__ import annotations

import os

import pytest

from pipeline.docker_env import host_gpu_count


def docker_required() -> bool:
    return os.environ.get("CI", "").lower() == "true" or os.environ.get("REQUIRE_DOCKER") == "1"


def gpu_required() -> bool:
    return os.environ.get("REQUIRE_GPU") == "1"


NO_GPU = "no NVIDIA GPU visible on this host (nvidia-smi -L lists none)"


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(config, items):
    """`beside`: an image test whose fixtures never reach the session's default image (pipeline_run): small
    images and the registry only. scripts/run-tests.sh runs them with the unit group, beside the image group;
    they run last, once the unit group's CPU work is done and the image group's later waits have begun."""
    for item in items:
        if "image" in item.keywords and "pipeline_run" not in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.beside)
    items[:] = sorted(items, key=lambda item: "beside" in item.keywords)  # stable: the order within each kept
    if gpu_required() or host_gpu_count() > 0:
        return
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=f"{NO_GPU}; gpu tests run on the GPU runner"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """REQUIRE_GPU=1: a gpu test on a host without a GPU fails before its fixtures build anything."""
    if "gpu" in item.keywords and gpu_required() and host_gpu_count() == 0:
        pytest.fail(f"REQUIRE_GPU=1 but {NO_GPU}; check the driver and the NVIDIA Container Toolkit", pytrace=False)
