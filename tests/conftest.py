"""Test groups are split by marker: unit (no Docker), image (Docker, no GPU), gpu.

Image tests need a Docker daemon. Where Docker is required (CI=true or
REQUIRE_DOCKER=1) an unreachable daemon fails them instead of skipping them, so
a CI run can never turn the image group into silent skips.
"""

from __future__ import annotations

import os

import pytest

from pipeline.docker_env import host_gpu_count


def docker_required() -> bool:
    return os.environ.get("CI", "").lower() == "true" or os.environ.get("REQUIRE_DOCKER") == "1"


def pytest_collection_modifyitems(config, items):
    has_gpu = host_gpu_count() > 0
    for item in items:
        if "gpu" in item.keywords and not has_gpu:
            item.add_marker(pytest.mark.skip(reason="no NVIDIA GPU on this host (gpu tests run on the GPU runner)"))
