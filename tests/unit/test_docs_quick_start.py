"""The quick start's commands as a newcomer copies them (README.md, docs/using-the-image.md): the first
`docker run` runs on a host without a GPU, a named container never asks for GPUs (Docker creates it
before it refuses `--gpus`, and the name then blocks the retry), every port is published on 127.0.0.1."""

from __future__ import annotations

import re
import shlex

import pytest

from pipeline.variants import REPO_ROOT

pytestmark = pytest.mark.unit

DOCUMENTS = ("README.md", "docs/using-the-image.md")


def docker_runs(text: str) -> list[list[str]]:
    """Each `docker run` of the document's bash blocks, continuation lines joined, as words (comments dropped)."""
    runs = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] == ["docker", "run"]:
                runs.append(words)
    return runs


@pytest.fixture(params=DOCUMENTS)
def runs(request) -> list[list[str]]:
    return docker_runs((REPO_ROOT / request.param).read_text())


def test_the_first_docker_run_needs_no_gpu(runs):
    assert not any(word.startswith("--gpus") for word in runs[0]), runs[0]


def test_a_named_container_asks_for_no_gpus(runs):
    named = [words for words in runs if any(word.startswith("--name") for word in words)]
    assert named and all(not any(w.startswith("--gpus") for w in words) for words in named), named


def test_every_published_port_is_on_the_loopback(runs):
    ports = [words[i + 1] for words in runs for i, word in enumerate(words[:-1]) if word == "-p"]
    assert ports and all(port.startswith("127.0.0.1:") for port in ports), ports


def test_a_gpu_flag_on_a_named_run_is_found():
    assert docker_runs("```bash\ndocker run -d --name torch \\\n  --gpus all IMAGE  # x\n```\n") == [
        ["docker", "run", "-d", "--name", "torch", "--gpus", "all", "IMAGE"]
    ]
