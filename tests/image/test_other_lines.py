"""The other lines `make lines` proves beside the default one (weekly, lines.yml; CI builds the default
line alone), each through the exact command a user
types (`python build.py --cuda X --push --registry ... --allow-cpu-validation`): the CUDA 12.1
line `--cuda 12.1` builds (from PyPI alone: on these machines PyTorch's index is out of reach),
and the newest torch line. Each is built, validated, tagged and pushed like the default line;
its images are removed after its tests. Every other line: `make matrix` (build.py matrix).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pipeline.variants import REPO_ROOT, resolve
from tests.image.conftest import REGISTRY, ca_cert, registry_manifest

pytestmark = [pytest.mark.image, pytest.mark.lines]


def _release(variant) -> tuple[int, ...]:
    return tuple(int(p) for p in variant.torch.split("."))


def chosen(matrix, which: str):
    if which == "cuda-12.1":
        return resolve(matrix, "12.1")
    return max((v for v in matrix.variants if v.uses_pypi), key=_release)  # the newest torch line


@pytest.fixture(scope="module", params=["cuda-12.1", "newest"])
def line(request, docker, matrix, tmp_path_factory):
    variant = chosen(matrix, request.param)
    reports = tmp_path_factory.mktemp(f"reports-{variant.name}")
    ca = ca_cert()
    argv = [sys.executable, str(REPO_ROOT / "build.py"), "--cuda", variant.cuda, "--push", "--registry", REGISTRY]
    argv += ["--repo", "proven-torch-test", "--allow-cpu-validation", "--report-dir", str(reports)]
    argv += ["--ca-cert", str(ca)] if ca else []
    done = subprocess.run(argv, capture_output=True, text=True, timeout=3000, cwd=REPO_ROOT, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    # a multi-arch line keeps one report per architecture (here amd64 alone: the default --platform)
    report = json.loads(next(reports.glob(f"{variant.name}/*/**/report.json")).read_text())
    yield variant, report, done.stdout
    for ref in [*report["tags"], report["stamped_image_id"], report["validated_image_id"]]:
        subprocess.run(["docker", "rmi", "-f", ref], capture_output=True, check=False)  # one line at a time on disk


def test_the_users_command_ends_in_a_validated_pushed_image(line):
    variant, report, stdout = line
    assert report["status"] == "pushed" and report["validation"]["ok"] is True and report["variant"] == variant.name
    tags = [t.rsplit(":", 1)[-1] for t in report["tags"]]  # the report keeps the tags alone
    assert tags[0].startswith(f"{variant.torch}-cu{variant.cuda.replace('.', '')}-py{variant.python}-")
    # its moving tag (`latest` is the default line's alone); a multi-arch line's images are tagged per
    # architecture, its plain tags being the index that only --platform all writes
    suffix = "-amd64" if variant.multi_arch else ""
    assert tags[1:] == [variant.name + suffix] and tags[0].endswith(suffix)
    assert "==> done: " in stdout and "(pushed)" in stdout
    assert ("per-architecture tags only" in stdout) == variant.multi_arch


def test_the_image_reports_the_pinned_torch_and_cuda_and_learns(line):
    variant, report, _ = line
    facts = report["validation"]["smoke"]["facts"]
    assert (facts["torch_release"], facts["cuda"]) == (variant.torch, variant.cuda)
    assert report["validation"]["ppo"]["solved"] is True
    assert report["validation"]["verdict"].startswith("proof: PROVEN on the CPU only")


def test_its_audit_is_the_disclosure_of_its_line(line):
    """What build.py list and proof show for the line is what its build's gate found (whole lock)."""
    variant, report, _ = line
    audit = report["validation"]["audit"]
    assert audit["status"] == "pass" and audit["failing"] == []
    section = audit.disclosures([variant])[variant.name]
    assert sorted((r["id"], r["package"]) for r in section["carried"]) == sorted(
        (f["id"], f["package"]) for f in audit["findings"] + audit["allowed"]
    )
    accepted = sorted(r["id"] for r in section["carried"] if r["accepted"])
    assert sorted(f["id"] for f in audit["allowed"]) == accepted


def test_the_registry_holds_exactly_the_tested_image(line):
    _, report, _ = line
    for ref, digest in report["pushed"].items():
        resp = registry_manifest(ref)
        assert resp.headers["Docker-Content-Digest"] == digest
        assert resp.json()["config"]["digest"] == report["stamped_image_id"]


def test_its_os_layers_are_the_default_images(line, docker, image):
    """Same base, same OS and user layers: a registry that has one line pushes only the other's Python layers."""
    _, report, _ = line
    mine = docker.images.get(report["stamped_image_id"]).attrs["RootFS"]["Layers"]
    default = docker.images.get(image).attrs["RootFS"]["Layers"]
    assert mine[:3] == default[:3] and mine != default


def test_the_image_says_which_line_it_is(line, docker):
    variant, report, _ = line
    env = dict(e.split("=", 1) for e in docker.images.get(report["stamped_image_id"]).attrs["Config"]["Env"])
    assert env["PROVEN_TORCH_VARIANT"] == variant.name
