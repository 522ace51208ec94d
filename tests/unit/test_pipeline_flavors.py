"""Flavors: a base variant plus one hash-locked layer built FROM the base image
(images/variants.toml [flavors.*]): resolution, tags, the lock and the Dockerfile."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from pipeline.errors import UsageError
from pipeline.lock import base_pins, is_locked, layers, lock_dir, lock_status
from pipeline.render import dockerfile_path, render, stale_files
from pipeline.stamp import compute_tags
from pipeline.validation import audit
from pipeline.variants import REPO_ROOT, resolve

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def rlhf(matrix):
    return resolve(matrix, "12.8", flavor="rlhf")


def test_a_flavor_is_its_base_line_plus_its_packages(matrix, rlhf):
    base = resolve(matrix, "12.8")
    assert (rlhf.name, rlhf.base_name, rlhf.flavor) == (f"{base.name}-rlhf", base.name, "rlhf")
    assert (rlhf.torch, rlhf.cuda, rlhf.index) == (base.torch, base.cuda, base.index)
    flavor = next(f for f in matrix.flavors if f.name == "rlhf")
    assert rlhf.pins() == base.pins() + list(flavor.packages)
    assert rlhf.size_budget_gb == base.size_budget_gb + flavor.size_budget_extra_gb
    assert not rlhf.is_default  # `latest` stays the base image's


def test_the_spec_carries_the_flavors_gate(rlhf):
    spec = rlhf.spec()
    assert spec["flavor"] == "rlhf" and spec["variant"] == rlhf.name
    assert set(spec["rlhf_gate"]) >= {"steps", "learning_rate", "min_gain", "seed", "processes"}


@pytest.mark.parametrize(
    ("cuda", "flavor", "message"),
    [("12.8", "nope", "unknown flavor 'nope'; the matrix has base, rlhf"), ("11.8", "rlhf", "the rlhf flavor is made for")],
)
def test_a_flavor_the_matrix_lacks_is_one_clear_refusal(matrix, cuda, flavor, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        resolve(matrix, cuda, flavor=flavor)


def test_flavor_tags_end_in_the_flavor_and_never_move_latest(rlhf):
    facts = {"facts": {"torch_release": rlhf.torch, "cuda": rlhf.cuda, "python": rlhf.python + ".2"}}
    immutable, moving = compute_tags(rlhf, facts, "20261203", "abc1234")
    assert immutable == f"{rlhf.torch}-cu128-py{rlhf.python}-20261203-abc1234-rlhf"
    assert moving == [f"{rlhf.torch_minor}-cu128-rlhf"]


def test_the_flavor_lock_holds_only_what_the_base_lacks(matrix, rlhf):
    assert is_locked(rlhf) and lock_status(matrix, rlhf) == "fresh"
    text = (lock_dir(rlhf) / layers(rlhf)[0][0]).read_text()
    names = {re.split(r"==", line)[0].lower() for line in text.splitlines() if re.match(r"^[a-z0-9]", line, re.I)}
    assert {name for name, _ in rlhf.flavor_packages} <= names
    assert not names & set(base_pins(rlhf)), "a package the base installs is in the flavor's layer"
    assert "torch" not in names and all("--hash=sha256:" in block for block in text.split("==")[1:])


def test_the_flavor_dockerfile_starts_from_the_base_image_with_one_pip_layer(matrix, rlhf):
    text = render(matrix, rlhf)
    assert re.search(r"^ARG TORCH=" + re.escape(rlhf.torch_minor) + "$", text, re.M)  # the line --flavor builds
    assert re.search(r"^ARG BASE_IMAGE=\S+:\$\{TORCH\}-cu" + rlhf.cuda.replace(".", "") + "$", text, re.M)
    assert "FROM ${BASE_IMAGE} AS base" in text and text.count("pip install --no-deps") == 1
    assert dockerfile_path(rlhf).name == f"Dockerfile.cu{rlhf.cuda.replace('.', '')}-rlhf"
    assert "--no-deps --require-hashes" in text and "/opt/proven-torch/lock/5-rlhf.txt" in text
    assert "pip freeze > /opt/proven-torch/constraints.txt" in text  # the new constraint covers the new packages
    assert f'io.proven-torch.variant="{rlhf.name}"' in text
    assert dockerfile_path(rlhf).read_text() == text  # committed and current


def test_render_check_covers_every_flavor(matrix, tmp_path):
    assert {v.name for v in matrix.every_variant()} >= {v.name for v in matrix.flavored_variants()}
    stale = {p.name for p in stale_files(matrix, audit.disclosures(matrix.every_variant()), root=tmp_path)}
    assert all(dockerfile_path(v).name in stale for v in matrix.flavored_variants())


def test_list_pin_prints_flavor_pins_and_refuses_unknown_ones(matrix):
    flavor = next(f for f in matrix.flavors if f.name == "rlhf")
    name, version = flavor.packages[0]
    done = subprocess.run([sys.executable, "build.py", "list", "--pin", name], capture_output=True, text=True, cwd=REPO_ROOT)
    assert done.stdout == f"{name}=={version}\n"
    whole = subprocess.run([sys.executable, "build.py", "list", "--pin", "rlhf"], capture_output=True, text=True, cwd=REPO_ROOT)
    assert whole.stdout.splitlines() == [f"{n}=={v}" for n, v in flavor.packages]
    bad = subprocess.run([sys.executable, "build.py", "list", "--pin", "nope"], capture_output=True, text=True, cwd=REPO_ROOT)
    assert bad.returncode == 2 and "--pin nope: not a package or flavor" in bad.stderr


def test_a_line_is_found_by_its_name_a_flavors_too(matrix):
    """What `build.py rebuild` looks up from a signed provenance's line (a flavor's name, since the lines test
    found by_name knows base lines only)."""
    assert all(matrix.line(v.name) == v for v in matrix.every_variant())
    assert any(v.flavored for v in matrix.every_variant())
    with pytest.raises(UsageError, match="unknown line 'no-such-line'"):
        matrix.line("no-such-line")
