"""The arm64 image, built and proven under qemu on this amd64 host, published with its amd64 twin
as one index: `make arm64` (about an hour on 2 cores, so not in `.ci/run`).

Through the command a user types: `build.py --cuda C --torch T --platform all --push`, for the
first multi-arch line of the matrix. Asserts what the issue asks: aarch64 inside, every CPU check
and the PPO gate passed under emulation and say so, the index on the registry lists both
platforms with the validated children, and a pull for arm64 through the plain tag yields the
validated arm64 image.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pipeline.variants import AMD64, ARM64, REPO_ROOT, arch
from tests.image.conftest import REGISTRY, ca_cert, manifest_inspect

pytestmark = [pytest.mark.image, pytest.mark.arm64]

REPO = "proven-torch-test-arm64"  # scripts/ci-cleanup.sh removes proven-torch-test* images
EMULATED = "validated under emulation on amd64; not run on Arm hardware or on a GPU"


@pytest.fixture(scope="module")
def built(docker, matrix, tmp_path_factory):
    variant = next(v for v in matrix.variants if v.multi_arch)
    reports = tmp_path_factory.mktemp("reports-arm64")
    ca = ca_cert()
    line = ["--cuda", variant.cuda, "--torch", variant.torch_minor, "--platform", "all"]
    push = ["--push", "--registry", REGISTRY, "--repo", REPO, "--allow-cpu-validation"]
    argv = [sys.executable, str(REPO_ROOT / "build.py"), *line, *push, "--report-dir", str(reports)]
    argv += ["--ca-cert", str(ca)] if ca else []
    done = subprocess.run(argv, capture_output=True, text=True, timeout=3 * 3600, cwd=REPO_ROOT, check=False)
    (reports / "build-stdout.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    run_dir = next(reports.glob(f"{variant.name}/*/index.json")).parent
    per_arch = {p: json.loads((run_dir / arch(p) / "report.json").read_text()) for p in variant.platforms}
    index = json.loads((run_dir / "index.json").read_text())
    yield variant, per_arch, index, done.stdout
    for report in per_arch.values():
        for ref in [*report["tags"], report["stamped_image_id"], report["validated_image_id"]]:
            subprocess.run(["docker", "rmi", "-f", ref], capture_output=True, check=False)


def test_both_architectures_were_validated_the_arm64_one_under_emulation(built):
    _, per_arch, _, _ = built
    amd, arm = per_arch[AMD64], per_arch[ARM64]
    assert amd["status"] == arm["status"] == "pushed"
    assert amd["validation"]["emulated"] is False and arm["validation"]["emulated"] is True
    assert arm["validation"]["validated_on"] == f"{ARM64}: {EMULATED}"
    assert [s["status"] for s in arm["validation"]["stages"]] == ["pass"] * 4


def test_inside_the_arm64_image_the_machine_is_aarch64(built, docker):
    _, per_arch, _, _ = built
    out = docker.containers.run(per_arch[ARM64]["stamped_image_id"], ["uname", "-m"], entrypoint=[], remove=True)
    assert out.decode().strip() == "aarch64"
    assert docker.images.get(per_arch[ARM64]["stamped_image_id"]).attrs["Architecture"] == "arm64"


def test_the_arm64_proof_passed_its_cpu_checks_and_the_ppo_gate_and_says_where(built):
    variant, per_arch, _, _ = built
    validation = per_arch[ARM64]["validation"]
    smoke = validation["smoke"]
    assert smoke["ok"] is True and smoke["facts"]["machine"] == "aarch64" and smoke["facts"]["emulation"]
    assert (smoke["facts"]["torch_release"], smoke["facts"]["cuda"]) == (variant.torch, variant.cuda)
    assert validation["ppo"]["solved"] is True
    assert "under emulation" in validation["verdict"] and "not run on Arm hardware or on a GPU" in validation["verdict"]
    skipped = [c for c in smoke["checks"] if c["status"] == "skip"]
    assert all(c["detail"] for c in skipped), "a check not run must say why"
    assert not any(c["status"] == "fail" for c in smoke["checks"])


def test_the_label_says_what_was_proven_where(built, docker):
    _, per_arch, _, _ = built
    labels = docker.images.get(per_arch[ARM64]["stamped_image_id"]).labels
    assert labels["io.proven-torch.validated-on"] == f"{ARM64}: {EMULATED}"
    assert labels["io.proven-torch.gpu-validated"] == "false"


def test_the_index_lists_both_platforms_with_the_validated_children(built):
    variant, per_arch, index, _ = built
    children = {c["platform"]: c for c in index["children"]}
    assert set(children) == set(variant.platforms)
    for platform, report in per_arch.items():
        assert children[platform]["stamped_image_id"] == report["stamped_image_id"]
        assert children[platform]["digest"] in report["pushed"].values()
    listed = manifest_inspect(next(iter(index["index"])))
    assert listed.returncode == 0, listed.stderr
    found = {m["platform"]["architecture"]: m["digest"] for m in json.loads(listed.stdout)["manifests"]}
    assert found == {arch(p): children[p]["digest"] for p in variant.platforms}
    assert [ref.rsplit(":", 1)[1] for ref in index["index"]][1:] == [variant.name]


def test_pulling_the_plain_tag_for_arm64_yields_the_validated_arm64_image(built, docker):
    variant, per_arch, _, _ = built
    ref = f"{REGISTRY}/{REPO}"
    pulled = docker.images.pull(ref, tag=variant.name, platform=ARM64)
    assert pulled.id == per_arch[ARM64]["stamped_image_id"]
    docker.images.remove(f"{ref}:{variant.name}", force=False)
