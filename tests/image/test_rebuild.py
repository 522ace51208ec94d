"""`build.py rebuild` of the session's pushed, signed default image (conftest's pipeline run), cold, in a
worktree of this clone: it gives the same image; and built from a copy whose lock has one package bumped,
it differs and names that package and its files; the rlhf flavor, pushed and signed, rebuilds (its base
first) to itself. Each rebuild is a whole cold build (minutes): weekly (make lines)."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys

import pytest

from pipeline.line import run
from pipeline.lock import lock_dir
from pipeline.variants import REPO_ROOT, resolve
from tests.image.conftest import ca_cert, pushed_request

pytestmark = [pytest.mark.image, pytest.mark.lines]


def rebuild(ref: str, public, *extra: str) -> subprocess.CompletedProcess:
    ca = ca_cert()
    argv = [sys.executable, str(REPO_ROOT / "build.py"), "rebuild", ref, "--key", str(public), *extra]
    return subprocess.run(argv + (["--ca-cert", str(ca)] if ca else []), capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def signed(run_result) -> str:
    ref, digest = next(iter(run_result.pushed.items()))
    return f"{ref.rsplit(':', 1)[0]}@{digest}"


def test_the_pushed_signed_image_rebuilds_to_itself(signed, sign_keys, tmp_path):
    done = rebuild(signed, sign_keys["public"], "--out", str(tmp_path / "report"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1].startswith(f"REPRODUCED: {signed}")


def older_wheel(package: str, version: str, folder) -> tuple[str, str]:
    """(the newest version of `package` below `version`, its wheel's sha256), from the package index."""
    ca = ca_cert()
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        f"{package}<{version}",
        "--no-deps",
        "--only-binary=:all:",
        "-d",
        str(folder),
    ]
    subprocess.run(argv + (["--cert", str(ca)] if ca else []), check=True, capture_output=True, timeout=300)
    wheel = next(folder.glob(f"{package}-*.whl"))
    return wheel.name.split("-")[1], hashlib.sha256(wheel.read_bytes()).hexdigest()


def test_a_package_bumped_in_a_copy_of_the_lock_is_named(signed, sign_keys, variant, tmp_path):
    copy = tmp_path / "source"
    subprocess.run(
        ["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", str(copy), "HEAD"], check=True, capture_output=True
    )
    try:
        lock = lock_dir(variant, copy / "images" / "locks") / "4-packages.txt"
        text = lock.read_text()
        block = re.search(r"^tqdm==(?P<version>\S+) \\\n(?:    --hash=\S+(?: \\)?\n)+", text, re.M)
        older, sha = older_wheel("tqdm", block["version"], tmp_path)
        lock.write_text(text.replace(block.group(0), f"tqdm=={older} \\\n    --hash=sha256:{sha}\n"))
        done = rebuild(signed, sign_keys["public"], "--source", str(copy), "--out", str(tmp_path / "report"))
    finally:
        subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(copy)], capture_output=True)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    out = done.stdout
    assert "DIFFERS: " in out and "4-packages.txt" in out  # the layer of the lock that changed, and the ones above
    assert f"inputs moved: pypi/tqdm {block['version']} -> {older}" in out
    listed = "".join(path.read_text() for path in (tmp_path / "report").glob("layer-*.txt"))  # the files, by name
    assert f"site-packages/tqdm-{older}.dist-info/METADATA: only in the rebuilt layer" in listed, out
    assert f"site-packages/tqdm-{block['version']}.dist-info/METADATA: only in the pushed layer" in listed, out


@pytest.fixture(scope="module")
def signed_flavor(docker, matrix, pipeline_run, sign_keys, tmp_path_factory) -> str:
    """The rlhf flavor built on the session's base, validated, pushed and signed with the session's key."""
    if pipeline_run is None:
        pytest.skip("PROVEN_TORCH_TEST_IMAGE given: the pipeline runs were skipped")
    flavor = resolve(matrix, matrix.default_cuda, flavor="rlhf")
    config = pushed_request(matrix, flavor, "proven-torch-test-rebuild", tmp_path_factory.mktemp("flavor"), sign_keys)
    ref, digest = next(iter(run(config).pushed.items()))
    return f"{ref.rsplit(':', 1)[0]}@{digest}"


def test_a_pushed_signed_flavor_rebuilds_to_itself_its_base_first(signed_flavor, sign_keys, tmp_path):
    done = rebuild(signed_flavor, sign_keys["public"], "--out", str(tmp_path / "report"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "rebuilding the base image" in done.stdout  # the flavor starts FROM its base, rebuilt cold too
    assert done.stdout.strip().splitlines()[-1].startswith(f"REPRODUCED: {signed_flavor}")
