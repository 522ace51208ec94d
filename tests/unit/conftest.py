"""Fixtures the unit tests share."""

from __future__ import annotations

import pytest

from pipeline.variants import load_matrix


@pytest.fixture(scope="module")
def matrix():
    """The committed matrix (images/variants.toml), read once per test module."""
    return load_matrix()
