"""The push's pure parts (pipeline/push.py): the push order per compression, and the OCI layout patch
that keeps the validated config (the zstd push itself runs against a real registry in
tests/image/test_transport.py)."""

from __future__ import annotations

import hashlib
import json

import pytest

from pipeline import push

pytestmark = pytest.mark.unit

TAGS = ["3.4.1-cu128-py3.11-20261203-abc1234", "3.4-cu128", "latest"]


def test_gzip_pushes_every_tag_once_immutable_first():
    assert push.push_plan("gzip", TAGS) == [(t, t, "gzip") for t in TAGS]


def test_zstd_pushes_every_tag_as_zstd():
    assert push.push_plan("zstd", TAGS) == [(t, t, "zstd") for t in TAGS]


def test_both_keeps_plain_tags_gzip_and_adds_a_zstd_form_each_immutable_first():
    plan = push.push_plan("both", TAGS)
    assert plan[:2] == [(TAGS[0], TAGS[0], "gzip"), (TAGS[0], TAGS[0] + "-zstd", "zstd")]
    assert {(local, remote, form) for local, remote, form in plan} == {
        *((t, t, "gzip") for t in TAGS),
        *((t, t + "-zstd", "zstd") for t in TAGS),
    }
    assert all(form == "gzip" for local, remote, form in plan if remote == local)  # an old runtime can pull every plain tag


def _layout(tmp_path, converted: bytes):
    blobs = tmp_path / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    config_hex = hashlib.sha256(converted).hexdigest()
    (blobs / config_hex).write_bytes(converted)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": f"sha256:{config_hex}", "size": 2},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd", "digest": "sha256:" + "a" * 64, "size": 9}],
    }
    data = json.dumps(manifest).encode()
    manifest_hex = hashlib.sha256(data).hexdigest()
    (blobs / manifest_hex).write_bytes(data)
    index = {
        "schemaVersion": 2,
        "manifests": [{"digest": f"sha256:{manifest_hex}", "size": len(data), "annotations": {"x": "image"}}],
    }
    (tmp_path / "index.json").write_text(json.dumps(index))


def test_the_layout_gets_the_images_own_config_back(tmp_path):
    original = b'{"config":{"Healthcheck":{"Test":["CMD","healthcheck"]}},"rootfs":{"diff_ids":["sha256:1"]}}'
    _layout(tmp_path, b'{"config":{}}')
    push._use_exact_config(tmp_path, original)
    entry = json.loads((tmp_path / "index.json").read_text())["manifests"][0]
    data = (tmp_path / "blobs" / "sha256" / entry["digest"].split(":")[1]).read_bytes()
    assert entry["digest"] == "sha256:" + hashlib.sha256(data).hexdigest() and entry["size"] == len(data)
    assert entry["annotations"] == {"x": "image"}  # skopeo's tag annotation stays
    manifest = json.loads(data)
    assert manifest["config"]["digest"] == "sha256:" + hashlib.sha256(original).hexdigest()
    assert manifest["config"]["size"] == len(original)
    assert (tmp_path / "blobs" / "sha256" / manifest["config"]["digest"].split(":")[1]).read_bytes() == original
    assert manifest["layers"][0]["mediaType"].endswith("+zstd")


def _saved(config: bytes, closed: list, oci: bool = False) -> object:
    """A stand-in for the Docker SDK client whose `docker save` stream holds a layer and `config`, in odd
    chunks (an empty one among them), and records when the stream is closed; `oci`: Docker 25's layout."""
    import io
    import tarfile

    buf = io.BytesIO()
    image_id = "sha256:" + hashlib.sha256(config).hexdigest()
    with tarfile.open(fileobj=buf, mode="w") as archive:
        names = (
            (f"blobs/sha256/{'0' * 64}", f"blobs/sha256/{image_id[7:]}")
            if oci
            else ("0" * 64 + "/layer.tar", image_id[7:] + ".json")
        )
        for name, data in zip(names, (b"x" * 70_000, config), strict=True):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    saved = buf.getvalue()

    def stream(image: str, chunk_size: int):
        try:
            yield b""
            for at in range(0, len(saved), 1000):
                yield saved[at : at + 1000]
        finally:
            closed.append(image)

    class Client:
        class api:
            get_image = staticmethod(stream)

    return Client()


@pytest.mark.parametrize("oci", [False, True])
def test_the_exact_config_is_read_from_the_saved_stream_which_is_then_closed(oci):
    config = b'{"config":{"Healthcheck":{"Test":["CMD","healthcheck"]}}}'
    closed: list = []
    image_id = "sha256:" + hashlib.sha256(config).hexdigest()
    assert push.exact_config(_saved(config, closed, oci), image_id) == config
    assert closed == [image_id]
    with pytest.raises(push.PushFailed, match="could not read the exact config"):
        push.exact_config(_saved(config, closed, oci), "sha256:" + "0" * 64)
