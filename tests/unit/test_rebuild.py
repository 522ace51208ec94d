"""`build.py rebuild`'s judgement (pipeline/rebuild.py): what a signed image says a rebuild needs, and
what differs between the pushed image and its rebuild. The rebuild itself is an image test (lines)."""

from __future__ import annotations

import pytest

from pipeline import labels, rebuild_config
from pipeline.errors import UsageError
from pipeline.rebuild import Pushed, RebuildRequest, compare, inputs_moved, moved, rebuild, settings
from pipeline.registry import ImageRef

pytestmark = pytest.mark.unit

LAYERS = ["sha256:" + c * 64 for c in "abc"]
STEPS = [
    "ADD rootfs.tar / # buildkit",
    "RUN |1 SOURCE_DATE_EPOCH=1796523727 /bin/bash -o pipefail -c started=$(date +%s) && apt-get update # buildkit",
    "RUN |1 SOURCE_DATE_EPOCH=1 /bin/bash -o pipefail -c pip install -r /mnt/lock-amd64.txt && cp /mnt/lock-amd64.txt "
    "/opt/proven-torch/lock/4-packages.txt",
]
OWN_LABELS = {
    "org.opencontainers.image.revision": "1234567",
    "org.opencontainers.image.created": "2026-12-06T12:25:03Z",
    "io.proven-torch.source-date-epoch": "1796523727",
    "io.proven-torch.files-epoch": "1796559903",
    "io.proven-torch.variant": "x-cu128",
}
SBOM = frozenset({"pkg:pypi/tqdm@4.67.1", "pkg:deb/debian/less@590-2.1?arch=amd64&distro=debian-bookworm"})


def config(layers=LAYERS, stamped=True, **own) -> dict:
    stamp = {key: "stamped" for key in labels.STAMPED} if stamped else {}
    env = ["PATH=/opt/venv/bin:/usr/bin", *([f"{labels.STAMPED_ENV}={{}}"] if stamped else [])]
    return {
        "rootfs": {"diff_ids": list(layers)},
        "config": {
            "User": "1000:100",
            "Env": env,
            "Labels": {**OWN_LABELS, **own, **stamp},
            "Image": "sha256:parent" if stamped else "",
        },
    }


def pushed(**kwargs) -> Pushed:
    fields = {
        "ref": ImageRef("127.0.0.1:5000", "p", "t"),
        "line": "x-cu128",
        "platform": "linux/amd64",
        "revision": "1234567" + "0" * 33,
    }
    return Pushed(**{**fields, "config": config(), "packages": SBOM, **kwargs})


def test_the_build_arguments_come_from_the_signed_images_labels():
    args = pushed().build_args()
    assert args[rebuild_config.SYSTEM_EPOCH] == "1796523727" and args[rebuild_config.FILES_EPOCH] == "1796559903"
    assert args["REVISION"] == "1234567" and args["CREATED"] == "2026-12-06T12:25:03Z"


def test_an_image_from_before_reproducible_builds_or_a_dirty_checkout_cannot_be_rebuilt():
    old = config()
    del old["config"]["Labels"]["io.proven-torch.files-epoch"]
    with pytest.raises(UsageError, match="no io.proven-torch.files-epoch label: it was built before"):
        pushed(config=old).build_args()
    with pytest.raises(UsageError, match="a checkout with changes cannot be rebuilt"):
        pushed(revision="1234567" + "0" * 33 + "-dirty").build_args()
    with pytest.raises(UsageError, match="not a commit"):  # the label and the signed revision disagree
        pushed(config=config(**{"org.opencontainers.image.revision": "7654321"})).build_args()
    for revision in ("--upload-pack=touch x", "1234567"):  # an option for git, a short name: refused before git sees it
        with pytest.raises(UsageError, match="not a commit"):
            pushed(revision=revision).build_args()
    with pytest.raises(UsageError, match="not a commit"):  # an empty label matches every revision: refused
        pushed(config=config(**{"org.opencontainers.image.revision": ""})).build_args()


def test_the_stamp_is_not_a_difference():
    assert settings(config()) == settings(config(stamped=False))
    assert compare(pushed(), config(stamped=False), STEPS) == []


def test_a_layer_that_differs_is_named_with_its_step_and_the_packages_that_moved():
    rebuilt = config(layers=[*LAYERS[:2], "sha256:" + "d" * 64], stamped=False)
    bumped = frozenset({"pkg:pypi/tqdm@4.67.0", *SBOM - {"pkg:pypi/tqdm@4.67.1"}})
    found = compare(pushed(), rebuilt, STEPS) + inputs_moved(SBOM, bumped)
    assert (
        found[0]
        == "layer 3 differs (sha256:cccccccccccc… pushed, sha256:dddddddddddd… rebuilt): the Python layer of 4-packages.txt"
    )
    assert found[-1] == "inputs moved: pypi/tqdm 4.67.1 -> 4.67.0"
    assert len(found) == 2


def test_settings_that_differ_are_said_and_a_missing_layer_counted():
    rebuilt = config(layers=LAYERS[:2], stamped=False, **{"io.proven-torch.variant": "other"})
    found = compare(pushed(), rebuilt, STEPS)
    assert found[0] == "layers: 3 pushed, 2 rebuilt"
    assert any(line.startswith("settings differ") for line in found)


def test_moved_pairs_versions_by_package():
    signed = frozenset({"pkg:pypi/a@1", "pkg:pypi/b@2", "pkg:deb/debian/c@3?arch=amd64"})
    rebuilt = frozenset({"pkg:pypi/a@1", "pkg:pypi/b@2.1", "pkg:pypi/d@4"})
    assert moved(signed, rebuilt) == ["pypi/b 2 -> 2.1", "-deb/debian/c 3", "+pypi/d 4"]


def test_a_step_is_said_in_a_few_words():
    from pipeline.rebuild import step

    assert step(STEPS[1]) == "apt-get update # buildkit"
    assert step(STEPS[2]) == "the Python layer of 4-packages.txt"
    assert step(STEPS[0]) == "ADD rootfs.tar / # buildkit"


def test_no_package_moved_is_no_line():
    assert inputs_moved(SBOM, SBOM) == []


def test_a_report_folder_that_holds_anything_is_refused_before_the_image_is_read(tmp_path):
    """Nothing is read or built (minutes) only to find the files cannot be written, nor a user's folder mixed into."""
    (tmp_path / "mine.txt").write_text("a user's file\n")
    with pytest.raises(UsageError, match="give an empty or new folder"):
        rebuild(RebuildRequest("127.0.0.1:1/p:t", (tmp_path / "k.pub",), out=tmp_path))
    assert (tmp_path / "mine.txt").read_text() == "a user's file\n"
