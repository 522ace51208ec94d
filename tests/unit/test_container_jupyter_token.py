"""container/jupyter_token.py: the one "no empty token" rule, on configs shaped as
`jupyter-lab --show-config-json` prints them (the image tests run the real
Jupyter: tests/image/test_jupyter_lifecycle.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TOOL = Path(__file__).resolve().parents[2] / "container" / "jupyter_token.py"
IMAGE_DEFAULTS = {"ServerApp": {"ip": "0.0.0.0", "port": 8888, "root_dir": "/workspace"}, "NotebookApp": {}}


def run(config) -> subprocess.CompletedProcess:
    text = config if isinstance(config, str) else json.dumps(config)
    return subprocess.run([sys.executable, str(TOOL)], input=text, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(
    ("section", "value"),
    [("IdentityProvider", ""), ("ServerApp", ""), ("NotebookApp", "''"), ("IdentityProvider", ' "" ')],
)
def test_an_empty_token_anywhere_jupyter_reads_one_is_refused(section, value):
    config = {**IMAGE_DEFAULTS, section: {**IMAGE_DEFAULTS.get(section, {}), "token": value}}
    result = run(config)
    assert (result.returncode, result.stdout) == (3, f"{section}.token is empty\n")


@pytest.mark.parametrize(
    "config",
    [IMAGE_DEFAULTS, {**IMAGE_DEFAULTS, "IdentityProvider": {"token": "abc"}}, {"ServerApp": {"token": "x", "port": 9999}}, {}],
)
def test_token_auth_left_on_passes(config):
    result = run(config)
    assert (result.returncode, result.stdout) == (0, "")


def test_unreadable_config_is_refused_not_waved_through():
    result = run("[W 2026 ServerApp] not json")
    assert result.returncode == 3 and result.stdout.startswith("cannot read Jupyter's resolved config")
