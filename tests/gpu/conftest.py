"""The GPU group reuses the image fixtures of the image tests."""

from tests.image.conftest import docker, image, matrix, pipeline_run, variant  # noqa: F401
