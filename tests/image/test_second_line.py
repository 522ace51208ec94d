"""The 2.11-cu130 line (torch 2.11 as the matrix pins it, PyPI's CUDA 13.0 build) through the real pipeline:
built, validated, tagged and pushed like the default line, with no known high or
critical advisory in its audit. Its lower layers are the default image's.
"""

from __future__ import annotations

import json

import pytest

from pipeline.run import BuildConfig, run
from pipeline.variants import resolve
from tests.image.conftest import REGISTRY, ca_cert, registry_manifest

pytestmark = pytest.mark.image


@pytest.fixture(scope="module")
def line(docker, matrix, tmp_path_factory):
    variant = resolve(matrix, "13.0", "2.11")
    config = BuildConfig(
        matrix=matrix, variant=variant, push=True, registry=REGISTRY, repo="proven-torch-test",
        ca_cert=ca_cert(), allow_cpu_validation=True, report_dir=tmp_path_factory.mktemp("reports-2.11"),
    )  # fmt: skip
    result = run(config)
    return variant, result, json.loads(result.report_path.read_text())


def test_it_is_validated_and_pushed(line):
    variant, result, report = line
    assert report["status"] == "pushed" and report["validation"]["ok"] is True
    assert [t.rsplit(":", 1)[1] for t in result.tags[1:]] == ["2.11-cu130"]  # not `latest`: not the default line
    assert result.tags[0].rsplit(":", 1)[1].startswith(f"{variant.torch}-cu130-py{variant.python}-")


def test_the_image_is_torch_2_11_on_cuda_13(line):
    variant, _, report = line
    facts = report["validation"]["smoke"]["facts"]
    assert variant.torch.startswith("2.11.") and variant.cuda == "13.0"
    assert (facts["torch_release"], facts["cuda"]) == (variant.torch, variant.cuda)
    assert report["validation"]["verdict"].startswith("proof: PROVEN on the CPU only")


def test_its_audit_has_no_high_or_critical_finding(line, docker):
    _, result, report = line
    audit = report["validation"]["audit"]
    assert audit["status"] == "pass" and audit["failing"] == [] and audit["allowed"] == []
    assert not [f for f in audit["findings"] if f["severity"] in ("HIGH", "CRITICAL", "UNKNOWN")]
    assert docker.images.get(result.stamped_id).labels["io.proven-torch.advisories"].startswith("none known")


def test_the_registry_holds_exactly_the_tested_image(line):
    _, result, _ = line
    for ref, digest in result.pushed.items():
        resp = registry_manifest(ref)
        assert resp.headers["Docker-Content-Digest"] == digest and resp.json()["config"]["digest"] == result.stamped_id


def test_its_os_layers_are_the_default_images(line, docker, image):
    """Same base, same OS and user layers: a registry that has one line pushes only the other's Python layers."""
    _, result, _ = line
    mine = docker.images.get(result.stamped_id).attrs["RootFS"]["Layers"]
    default = docker.images.get(image).attrs["RootFS"]["Layers"]
    assert mine[:3] == default[:3] and mine != default
