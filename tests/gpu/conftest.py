"""The GPU group reuses the image fixtures of the image tests."""

from tests.image.conftest import docker, image, matrix, pipeline_run, run_log, sign_keys, variant  # noqa: F401
