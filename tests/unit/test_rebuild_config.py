"""The reproducible config (pipeline/rebuild_config.py) and the archive that gives every layer its /etc."""

from __future__ import annotations

import json
import tarfile

import pytest

from pipeline import rebuild_config
from pipeline.errors import BuildFailed
from pipeline.variants import REPO_ROOT

pytestmark = pytest.mark.unit

ATTRS = {
    "Architecture": "amd64",
    "Os": "linux",
    "Config": {"User": "1000:100", "Env": ["PATH=/usr/bin"], "Labels": {"a": "b"}},
    "RootFS": {"Type": "layers", "Layers": ["sha256:" + str(i) * 64 for i in range(1, 5)]},
}


def history(created: int) -> list[dict]:
    """The Engine's history, newest first, as BuildKit leaves it: each entry at the build's clock."""
    oldest_first = [
        {"CreatedBy": "ADD rootfs.tar / # buildkit", "Size": 80_000_000},
        {"CreatedBy": 'CMD ["bash"]', "Size": 0},
        {"CreatedBy": "RUN /bin/bash -c install -d /opt # buildkit", "Size": 0},  # a layer of folders only: no bytes
        {"CreatedBy": "ENV A=1", "Size": 0},
        {"CreatedBy": "WORKDIR /workspace", "Size": 0},  # here a layer: the count of layers says so
        {"CreatedBy": "COPY x /x # buildkit", "Size": 12, "Comment": "buildkit.dockerfile.v0"},
    ]
    return [{**entry, "Created": created + i} for i, entry in reversed(list(enumerate(oldest_first)))]


def test_two_builds_at_different_times_give_one_config():
    when = "2026-11-30T10:00:00Z"
    first = rebuild_config.config_bytes(ATTRS, history(1_796_000_000), when)
    later = rebuild_config.config_bytes(ATTRS, history(1_796_900_000), when)
    assert first == later
    config = json.loads(first)
    assert config["created"] == when and {e["created"] for e in config["history"]} == {when}
    assert config["rootfs"]["diff_ids"] == ATTRS["RootFS"]["Layers"]
    assert [bool(e.get("empty_layer")) for e in config["history"]] == [False, True, False, True, False, False]
    assert config["history"][-1]["comment"] == "buildkit.dockerfile.v0"


def test_another_epoch_or_another_layer_is_another_config():
    base = rebuild_config.config_bytes(ATTRS, history(0), "2026-11-30T10:00:00Z")
    assert rebuild_config.config_bytes(ATTRS, history(0), "2026-11-30T10:00:01Z") != base
    other = {**ATTRS, "RootFS": {"Layers": [*ATTRS["RootFS"]["Layers"][:3], "sha256:" + "9" * 64]}}
    assert rebuild_config.config_bytes(other, history(0), "2026-11-30T10:00:00Z") != base


def test_a_workdir_without_a_layer_is_an_empty_entry():
    three = {**ATTRS, "RootFS": {"Layers": ATTRS["RootFS"]["Layers"][:3]}}
    config = json.loads(rebuild_config.config_bytes(three, history(0), "2026-11-30T10:00:00Z"))
    assert [bool(e.get("empty_layer")) for e in config["history"]] == [False, True, False, True, True, False]


def test_a_history_that_does_not_match_the_layers_is_refused_not_guessed():
    short = {**ATTRS, "RootFS": {"Layers": ATTRS["RootFS"]["Layers"][:2]}}
    with pytest.raises(BuildFailed, match="does not match its 2 layers"):
        rebuild_config.config_bytes(short, history(0), "2026-11-30T10:00:00Z")


def test_created_is_the_newest_inputs_epoch():
    args = {rebuild_config.SYSTEM_EPOCH: "1796523727", rebuild_config.FILES_EPOCH: "1796559903", "REVISION": "abc1234"}
    assert rebuild_config.created(args) == "2026-12-06T12:25:03Z"
    assert rebuild_config.created({"REVISION": "abc1234"}) is None  # no git: no epochs


def test_a_git_checkout_has_both_epochs_for_every_line(matrix):

    for variant in matrix.every_variant():
        epochs = rebuild_config.epochs(variant)
        assert set(epochs) == {rebuild_config.SYSTEM_EPOCH, rebuild_config.FILES_EPOCH}, variant.name
        assert all(value.isdigit() and int(value) > 1_600_000_000 for value in epochs.values())


def test_the_etc_archive_holds_etc_and_hosts_at_a_fixed_time_and_nothing_else():
    with tarfile.open(REPO_ROOT / "images" / "os" / "etc-hosts.tar") as archive:
        members = {m.name: m for m in archive}
        assert sorted(members) == ["etc", "etc/hosts"]
        assert members["etc"].isdir() and members["etc"].mode == 0o755
        assert members["etc/hosts"].isfile() and members["etc/hosts"].mode == 0o644
        assert {(m.uid, m.gid, m.mtime) for m in members.values()} == {(0, 0, 1_700_000_000)}
        assert b"localhost" in archive.extractfile("etc/hosts").read()


def test_every_image_names_its_epochs_in_its_labels(matrix):
    """A rebuild reads the revision and the epochs from the image it checks (docs/supply-chain.md)."""
    from pipeline.render import render

    for variant in matrix.every_variant():
        text = render(matrix, variant)
        assert 'io.proven-torch.source-date-epoch="${SOURCE_DATE_EPOCH}"' in text, variant.name
        assert 'io.proven-torch.files-epoch="${FILES_EPOCH}"' in text, variant.name
        assert text.rindex("ARG SOURCE_DATE_EPOCH") < text.rindex("io.proven-torch.source-date-epoch"), variant.name
