"""Lock files: split into layers, staleness against the matrix, determinism."""

from __future__ import annotations

import dataclasses
import re

import pytest

from pipeline.lock import LAYERS, compile_lock, is_locked, lock_dir, lock_status, split_lock, wheel_platform, write_lock
from pipeline.render import render
from pipeline.variants import resolve

pytestmark = pytest.mark.unit

SAMPLE = """\
jupyterlab==4.0.0 \\
    --hash=sha256:aaaa
    # via -r requirements.in
nvidia-cublas-cu12==12.8.4.1 \\
    --hash=sha256:bbbb
    # via
    #   nvidia-cudnn-cu12
    #   torch
nvidia-cudnn-cu12==9.10.2.21 \\
    --hash=sha256:cccc
nvidia-nccl-cu12==2.0.0 \\
    --hash=sha256:dddd
torch==1.0.0 \\
    --hash=sha256:eeee
triton==3.0.0 \\
    --hash=sha256:ffff
torchvision==0.1.0 \\
    --hash=sha256:0000
"""


def _names(text):
    return [line.split("==")[0] for line in text.splitlines() if line and not line.startswith((" ", "#"))]


def test_split_puts_each_package_in_its_layer():
    parts = split_lock(SAMPLE)
    assert list(parts) == [file for file, _ in LAYERS]
    assert _names(parts["1-cuda-libs-a.txt"]) == ["nvidia-cublas-cu12", "nvidia-cudnn-cu12"]
    assert _names(parts["2-cuda-libs-b.txt"]) == ["nvidia-nccl-cu12"]
    assert _names(parts["3-torch.txt"]) == ["torch", "triton"]
    assert _names(parts["4-packages.txt"]) == ["jupyterlab", "torchvision"]


def test_split_keeps_every_hash():
    parts = split_lock(SAMPLE)
    assert sum(p.count("--hash=") for p in parts.values()) == SAMPLE.count("--hash=")


def test_default_variant_is_locked_and_fresh(matrix):
    variant = resolve(matrix, matrix.default_cuda)
    assert is_locked(variant)
    assert lock_status(matrix, variant) == "fresh"


def test_every_locked_file_pins_with_hashes(matrix):
    variant = resolve(matrix, matrix.default_cuda)
    for file, _ in LAYERS:
        text = (lock_dir(variant) / file).read_text()
        names = _names(text)
        assert names, file
        assert text.count("==") >= len(names) and text.count("--hash=sha256:") >= len(names)


def test_changing_a_pin_makes_the_lock_stale(matrix):
    variant = resolve(matrix, matrix.default_cuda)
    bumped = dataclasses.replace(variant, packages=tuple((n, v + ".post1") for n, v in variant.packages))
    assert lock_status(matrix, bumped) == "stale"
    other_time = dataclasses.replace(matrix, resolved_before="2027-01-01T00:00:00Z")
    assert lock_status(other_time, variant) == "stale"


def test_locked_dockerfile_installs_with_hashes_only(matrix):
    text = render(matrix, resolve(matrix, matrix.default_cuda))
    installs = [line for line in text.splitlines() if re.match(r' && (pip|python3 ".*/pip") install ', line)]
    assert len(installs) == len(LAYERS)
    assert all("--require-hashes" in line and "--no-deps" in line for line in installs)
    assert "ENV PIP_CONSTRAINT=/opt/proven-torch/constraints.txt" in text


def test_unlocked_variant_says_so(matrix):
    variant = resolve(matrix, "11.8")
    if is_locked(variant):
        pytest.skip("the CUDA 11.8 line has a lock now")
    assert f"No lock yet for {variant.name}" in render(matrix, variant)


@pytest.mark.network
def test_lock_generation_is_deterministic_and_matches_the_committed_lock(matrix, tmp_path):
    """Same matrix, same lock: resolve twice (PyPI, frozen by resolved_before) and compare."""
    variant = resolve(matrix, matrix.default_cuda)
    first, second = compile_lock(matrix, variant), compile_lock(matrix, variant)
    assert first == second
    write_lock(matrix, variant, first, root=tmp_path)
    for file, _ in LAYERS:
        assert (lock_dir(variant, tmp_path) / file).read_text() == (lock_dir(variant) / file).read_text(), file


def multi_arch_lines(matrix):
    return [v for v in matrix.variants if v.multi_arch]


def test_every_platform_of_a_multi_arch_line_has_a_complete_hashed_fresh_lock(matrix):
    """Each platform's lock: every layer file, every pin hashed, fresh against the matrix, for that platform."""
    lines = multi_arch_lines(matrix)
    assert lines, "the matrix lists no multi-arch line"
    for variant in lines:
        for platform in variant.platforms:
            assert lock_status(matrix, variant, platform=platform) == "fresh", (variant.name, platform)
            folder = lock_dir(variant, platform=platform)
            pins = {}
            for file, _ in LAYERS:
                text = (folder / file).read_text()
                assert wheel_platform(platform) in text.splitlines()[1], f"{folder / file} was not resolved for {platform}"
                for block in text.split("\n"):
                    if block and block[0].isalnum():
                        assert block.rstrip().endswith("\\"), f"{folder / file}: {block} has no hash"
                        pins[block.split("==")[0]] = block.split("==")[1].split()[0]
            assert pins["torch"] == variant.torch and any(name.startswith("nvidia-") for name in pins), (variant.name, platform)


def test_a_lock_for_one_platform_does_not_pass_for_another(matrix, tmp_path):
    """The digest names the platform: an amd64 lock copied into the arm64 folder is stale."""
    variant = multi_arch_lines(matrix)[0]
    amd64, arm64 = variant.platforms[0], variant.platforms[1]
    for platform in (amd64, arm64):
        target = lock_dir(variant, tmp_path, platform)
        target.mkdir(parents=True)
        for path in lock_dir(variant, platform=amd64).iterdir():
            (target / path.name).write_bytes(path.read_bytes())
    assert lock_status(matrix, variant, tmp_path, amd64) == "fresh"
    assert lock_status(matrix, variant, tmp_path, arm64) == "stale"
    assert not is_locked(variant, tmp_path / "none")


def test_a_multi_arch_dockerfile_picks_the_lock_by_target_arch(matrix):
    variant = multi_arch_lines(matrix)[0]
    text = render(matrix, variant)
    assert "ARG TARGETARCH" in text
    for arch in ("amd64", "arm64"):  # each architecture's file mounted, the one TARGETARCH names read
        assert f"source=images/locks/{variant.name}/{arch}/{LAYERS[0][0]},target=/mnt/lock-{arch}.txt" in text
    assert "-r /mnt/lock-${TARGETARCH}.txt" in text
    single = resolve(matrix, matrix.default_cuda)
    assert not single.multi_arch and "TARGETARCH" not in render(matrix, single)


def test_a_multi_arch_lines_architectures_pin_the_same_versions(matrix):
    """build.py list, the README and proof disclose a line's advisories from its amd64 lock: that holds
    for arm64 only while both locks pin the same packages at the same versions, but for what arm64
    leaves out on purpose ([gymnasium.left_out], e.g. box2d, which has no aarch64 wheel)."""
    from pipeline.lock import locked_packages

    for variant in multi_arch_lines(matrix):
        amd64, arm64 = (dict(locked_packages(variant, platform=p) or {}) for p in variant.platforms)
        left_out = set(variant.left_out(variant.platforms[1]))
        assert amd64 and set(amd64) - set(arm64) == left_out, variant.name
        assert {k: v for k, v in amd64.items() if k not in left_out} == arm64, variant.name


@pytest.mark.parametrize(
    "answer, read",
    [
        ({"info": {"version": "1.2", "requires_dist": ["a>=1"]}}, ("1.2", ["a>=1"])),
        ({"info": {"version": "1.2", "requires_dist": None}}, ("1.2", [])),
        ({"info": {"requires_dist": []}}, None),
        ({"info": "1.2"}, None),
        (["info"], None),
        ({"info": {"version": "2.0", "requires_dist": "numpy<2"}}, None),
        ({"info": {"version": None, "requires_dist": []}}, None),
        ({"info": {"version": "2.0", "requires_dist": [{"numpy": "<2"}]}}, None),
    ],
)
def test_pypis_answer_of_another_shape_is_could_not_ask_not_a_traceback(server, answer, read):
    """`build.py lock` asks PyPI whether an [overrides] entry is still needed: an answer it cannot read is
    "could not ask PyPI", never a traceback (a real HTTP server on 127.0.0.1 plays PyPI)."""
    import json

    from pipeline.lock import pypi_requires

    server.routes["/torch/json"] = (200, {"Content-Type": "application/json"}, json.dumps(answer).encode())
    assert pypi_requires("torch", f"http://{server.host}") == read


def test_a_hostile_pypi_answer_is_could_not_ask_within_its_bounds(server, monkeypatch):
    """The answer crosses a TLS-intercepting proxy: one too large, one nested too deep and one that drips are
    each "could not ask PyPI" (None): the large one refused past PYPI_ANSWER bytes, the drip within its deadline."""
    import time

    from common import deadlines
    from pipeline import lock
    from tests.crafted_registry import drip

    index = f"http://{server.host}"
    huge = b'{"info": {"version": "1", "requires_dist": ["' + b"a" * lock.PYPI_ANSWER + b'"]}}'
    server.routes["/huge/json"] = (200, {"Content-Type": "application/json"}, huge)
    server.routes["/deep/json"] = (200, {"Content-Type": "application/json"}, b"[" * 100_000 + b"]" * 100_000)
    server.routes["/drip/json"] = drip("application/json", b" ", 0.05, 400)
    monkeypatch.setitem(deadlines.DEADLINES, "pypi answer", 1)
    assert lock.pypi_requires("huge", index) is None and lock.pypi_requires("deep", index) is None
    started = time.monotonic()
    assert lock.pypi_requires("drip", index) is None
    assert time.monotonic() - started < 5
