"""zstd in the registry (build.py --compression): an image pushed with zstd layers by skopeo,
read back, pulled and unpacked by containerd (what Kubernetes runs); a push the registry
refuses moves no tag. CI pushes a small image made like the pipeline's (several layers, a
healthcheck, labels): the push path does not depend on size. `make lines` pushes the
validated torch image whole (about 3 minutes on 2 cores).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid

import pytest
import requests

from pipeline import push, registry
from pipeline.errors import PushFailed
from pipeline.publish import publish
from pipeline.target import Tagged, Target
from tests.image.conftest import REGISTRY, registry_manifest
from tests.records import build_request

pytestmark = pytest.mark.image

CONTAINERD = "/var/run/docker/containerd/containerd.sock"  # the containerd that Debian's dockerd starts


def ctr(namespace: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    exe = shutil.which("ctr")
    assert exe, "containerd's ctr is needed (Debian's containerd, installed with docker.io)"
    return subprocess.run([exe, "--address", CONTAINERD, "-n", namespace, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def namespace():
    """A containerd namespace of its own, emptied afterwards (Docker's prune does not see it)."""
    name = f"proven-torch-test-{uuid.uuid4().hex[:8]}"
    yield name
    for ref in ctr(name, "images", "ls", "-q").stdout.split():
        ctr(name, "images", "rm", "--sync", ref)
    digests = [line.split()[0] for line in ctr(name, "content", "ls", "-q").stdout.splitlines() if line.strip()]
    if digests:
        ctr(name, "content", "rm", *digests)
    ctr(name, "namespaces", "rm", name)


@pytest.fixture
def small_image(docker, matrix):
    """Three layers on the base OS image, a healthcheck and the test label: what the push must keep."""
    import io

    dockerfile = (
        f"FROM {matrix.base_image}\nRUN echo one > /one\nRUN echo two > /two\nRUN echo three > /three\n"
        'HEALTHCHECK CMD ["healthcheck"]\nLABEL io.proven-torch.role=test\n'
    )
    # a tag of its own: the test's push tag is removed afterwards, which must not remove the image
    built, _ = docker.images.build(fileobj=io.BytesIO(dockerfile.encode()), rm=True, forcerm=True, tag="proven-torch-test-small")
    yield built.id
    docker.images.remove(built.id, force=True)


@pytest.mark.parametrize("which", ["small", pytest.param("validated", marks=pytest.mark.lines, id="the-whole-validated-image")])
def test_a_zstd_push_is_the_image_and_containerd_pulls_it(request, docker, namespace, which):
    image = request.getfixturevalue("small_image" if which == "small" else "image")
    ref = f"{REGISTRY}/proven-torch-test-zstd"
    tag = f"t{uuid.uuid4().hex[:8]}"
    docker.images.get(image).tag(ref, tag)
    try:
        digest = push.push_tag_zstd(docker, image, ref, tag, tag + push.ZSTD_SUFFIX)  # reads it back itself, too
    finally:
        docker.images.remove(f"{ref}:{tag}")
    manifest = registry_manifest(f"{ref}:{tag}{push.ZSTD_SUFFIX}").json()
    assert manifest["config"]["digest"] == image  # the validated image's own config: same ID
    assert {layer["mediaType"] for layer in manifest["layers"]} == {"application/vnd.oci.image.layer.v1.tar+zstd"}

    pulled = ctr(namespace, "images", "pull", "--plain-http", f"{ref}@{digest}")
    assert pulled.returncode == 0, pulled.stderr[-2000:]
    check = ctr(namespace, "images", "check")
    assert "complete" in check.stdout and "true" in check.stdout.split("\n")[1], check.stdout  # every blob there, unpacked
    config = json.loads(ctr(namespace, "content", "get", manifest["config"]["digest"]).stdout)
    assert config["rootfs"]["diff_ids"] == docker.images.get(image).attrs["RootFS"]["Layers"]
    assert config["config"]["Healthcheck"]["Test"] == ["CMD", "healthcheck"]  # Docker's own fields kept


def test_a_refused_zstd_push_moves_no_tag(docker, matrix, readonly_registry, tmp_path, variant):
    # The push logic does not look at the image's size: the small base OS image keeps this quick.
    image = docker.images.get(matrix.base_image).id
    ref = f"{readonly_registry}/proven-torch-test"
    tags = ["t-immutable", "t-moving"]
    for tag in tags:
        docker.images.get(image).tag(ref, tag)
    target = Target(variant=variant, run_dir=tmp_path, ref=ref, date="20000101", created="test", revision="test")
    tagged = Tagged(validated_id=image, stamped_id=image, tags=tags, validation=None)  # the report then says "no validation"
    try:
        with pytest.raises(PushFailed) as err:
            publish(docker, tagged, target, *build_request(compression="zstd"))
        assert "\n" not in str(err.value) and "t-immutable" in str(err.value)
    finally:
        for tag in tags:
            docker.images.remove(f"{ref}:{tag}")
    for tag in tags:
        url = f"http://{readonly_registry}/v2/proven-torch-test/manifests/{tag}"
        assert requests.get(url, headers={"Accept": registry.MANIFEST_TYPES}, timeout=30).status_code == 404
    assert json.loads((tmp_path / "report.json").read_text())["push"]["refs"] == {}
