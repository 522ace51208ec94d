"""Fixtures the unit tests share."""

from __future__ import annotations

import pytest

from pipeline.variants import load_matrix


@pytest.fixture(scope="module")
def matrix():
    """The committed matrix (images/variants.toml), read once per test module."""
    return load_matrix()


@pytest.fixture
def server():
    """A real HTTP server on 127.0.0.1 whose answers the test writes (tests/crafted_registry.py): a registry,
    or PyPI."""
    from tests.crafted_registry import Server

    crafted = Server()
    yield crafted
    crafted.shutdown()
