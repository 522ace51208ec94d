"""Naming the files behind a layer a rebuild did not reproduce (pipeline/rebuild_files.py), on layers made
here: what differs and how, the differing files copied out, and layers that try to write elsewhere."""

from __future__ import annotations

import gzip
import hashlib
import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from pipeline import rebuild_files, registry
from pipeline.docker_env import Chunks
from pipeline.errors import RegistryDataRefused, RegistryUnreachable
from pipeline.rebuild_files import Entry, Pair, differences, member_path, pushed_side, walk
from tests.crafted_registry import REPO, Server, drip

pytestmark = pytest.mark.unit


def layer(*members: tuple) -> bytes:
    """A layer tar of (name, bytes or None for a folder or 'symlink:TARGET', mtime, mode)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, body, mtime, mode in members:
            info = tarfile.TarInfo(name)
            info.mtime, info.mode = mtime, mode
            if body is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif isinstance(body, str):
                info.type, info.linkname = tarfile.SYMTYPE, body.removeprefix("symlink:")
                tar.addfile(info)
            else:
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
    return out.getvalue()


PUSHED = layer(
    ("etc", None, 100, 0o755),
    ("etc/gitconfig", b"[filter]\n a = 1\n b = 2\n", 100, 0o644),
    ("usr/lib/x.pyc", b"\x00" * 40, 100, 0o644),
    ("usr/bin/tool", "symlink:/usr/lib/tool", 100, 0o777),
    ("var/log/dpkg.log", b"", 100, 0o644),
)
REBUILT = layer(
    ("etc", None, 100, 0o755),
    ("etc/gitconfig", b"[filter]\n b = 2\n a = 1\n", 100, 0o644),  # the same bytes in another order
    ("usr/lib/x.pyc", b"\x00" * 40, 200, 0o600),  # another time and mode, the same bytes
    ("usr/bin/tool", "symlink:/usr/lib/tool2", 100, 0o777),
    ("var/log/new.log", b"x", 100, 0o644),
)


def test_each_differing_path_says_what_differs_and_nothing_else_is_listed():
    found = differences(walk(io.BytesIO(PUSHED)), walk(io.BytesIO(REBUILT)))
    assert found == [
        "/etc/gitconfig: content, 23 vs 23 bytes",
        "/usr/bin/tool: target /usr/lib/tool vs /usr/lib/tool2",
        "/usr/lib/x.pyc: mode 0o644 vs 0o600, mtime 100 vs 200",
        "/var/log/dpkg.log: only in the pushed layer",
        "/var/log/new.log: only in the rebuilt layer",
    ]


def test_two_identical_layers_have_no_differences():
    assert differences(walk(io.BytesIO(PUSHED)), walk(io.BytesIO(PUSHED))) == []


def test_only_the_files_whose_content_differs_are_copied_out(tmp_path):
    pushed = walk(io.BytesIO(PUSHED))
    walk(io.BytesIO(REBUILT), pushed, tmp_path)
    copied = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert copied == ["etc/gitconfig", "var/log/new.log"]  # x.pyc's bytes are the same: only named
    assert (tmp_path / "etc/gitconfig").read_bytes() == b"[filter]\n b = 2\n a = 1\n"


@pytest.mark.parametrize("name", ["../../escaped", "/../escaped", "a/../../escaped", ".."])
def test_a_member_named_to_leave_the_layer_is_neither_listed_nor_written(tmp_path, name):
    """An attacker's pushed layer: a name that climbs out of the report folder."""
    out = tmp_path / "out"
    out.mkdir()
    found = walk(io.BytesIO(layer((name, b"owned", 1, 0o644), ("ok", b"fine", 1, 0o644))), {}, out)
    assert list(found) == ["/ok"] and not (tmp_path / "escaped").exists()
    assert member_path(name) is None


def test_a_symlinked_folder_in_the_report_is_not_followed(tmp_path):
    """A link in the way (planted in the folder by an earlier layer's files) is never written through."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "etc").symlink_to(elsewhere)
    walk(io.BytesIO(layer(("etc/passwd", b"owned", 1, 0o644))), {}, out)
    assert list(elsewhere.iterdir()) == []


def test_a_name_given_twice_keeps_the_first_copy_and_does_not_stop_the_walk(tmp_path):
    found = walk(io.BytesIO(layer(("a", b"first", 1, 0o644), ("a", b"second", 2, 0o644), ("b", b"x", 1, 0o644))), {}, tmp_path)
    assert (tmp_path / "a").read_bytes() == b"first" and set(found) == {"/a", "/b"} and found["/a"].mtime == 2


def test_a_file_past_the_copy_bound_is_named_not_copied(tmp_path, monkeypatch):
    monkeypatch.setattr(rebuild_files, "MAX_FILE_BYTES", 8)
    found = walk(io.BytesIO(layer(("big", b"x" * 9, 1, 0o644), ("small", b"y", 1, 0o644))), {}, tmp_path)
    assert set(found) == {"/big", "/small"} and [p.name for p in tmp_path.iterdir()] == ["small"]


def test_a_layer_with_too_many_members_is_refused(monkeypatch):
    monkeypatch.setattr(rebuild_files, "MAX_MEMBERS", 2)
    with pytest.raises(RegistryDataRefused, match="more than 2 files"):
        walk(io.BytesIO(layer(*((f"f{i}", b"", 1, 0o644) for i in range(3)))))


def pair(diff_id: str, media: str = "application/vnd.oci.image.layer.v1.tar+gzip") -> Pair:
    return Pair(2, {"mediaType": media, "digest": "sha256:x", "size": 1}, diff_id, "sha256:y")


def test_the_pushed_layer_must_uncompress_to_its_diff_id(tmp_path):
    blob = tmp_path / "layer"
    blob.write_bytes(gzip.compress(PUSHED))
    good = "sha256:" + hashlib.sha256(PUSHED).hexdigest()
    assert "/etc/gitconfig" in pushed_side(blob, pair(good))
    with pytest.raises(RegistryDataRefused, match="other bytes than its diff_id"):
        pushed_side(blob, pair("sha256:" + "0" * 64))


def test_a_zstd_layer_is_read_through_the_zstd_tool(tmp_path):
    if shutil.which("zstd") is None:
        pytest.fail("zstd is not installed: scripts/prepare-host.sh installs it (skopeo's zstd pushes need it too)")
    plain = tmp_path / "layer.tar"
    plain.write_bytes(PUSHED)
    subprocess.run(["zstd", "-q", str(plain), "-o", str(tmp_path / "layer")], check=True)
    diff_id = "sha256:" + hashlib.sha256(PUSHED).hexdigest()
    assert "/usr/bin/tool" in pushed_side(tmp_path / "layer", pair(diff_id, "application/vnd.oci.image.layer.v1.tar+zstd"))


def test_chunks_reads_across_chunk_borders():
    reader = Chunks(iter([b"ab", b"", b"cde", b"f"]))
    assert [reader.read(3), reader.read(1), reader.read(-1), reader.read(5)] == [b"abc", b"d", b"ef", b""]


def test_an_entry_keeps_what_a_rebuild_compares():
    entry = walk(io.BytesIO(PUSHED))["/usr/lib/x.pyc"]
    assert entry == Entry("file", 0o644, "0:0", 100, 40, hashlib.sha256(b"\x00" * 40).hexdigest())


def test_a_layer_whose_files_differ_only_in_time_says_there_is_nothing_for_diffoscope(tmp_path):
    """What `make reproduce` found: two whiteouts timed by the clock, no file's bytes different."""
    for side in ("pushed", "rebuilt"):
        (tmp_path / "layer-3" / side).mkdir(parents=True)
    line = rebuild_files.diffoscope(tmp_path / "layer-3", tmp_path / "layer-3.diffoscope.txt")
    assert line.startswith("no file's bytes differ") and not (tmp_path / "layer-3.diffoscope.txt").exists()


def test_the_report_lists_every_path_and_says_where_the_files_are(tmp_path, monkeypatch):
    monkeypatch.setattr(rebuild_files.shutil, "which", lambda *a, **k: None)
    (tmp_path / "layer-3" / "rebuilt").mkdir(parents=True)
    (tmp_path / "layer-3" / "rebuilt" / "new").write_text("x")
    line = rebuild_files.diffoscope(tmp_path / "layer-3", tmp_path / "layer-3.diffoscope.txt")
    assert line == f"the differing files are in {tmp_path / 'layer-3'} (install diffoscope for a report on them)"


def test_diffoscope_reports_on_the_copied_files(tmp_path):
    where = tmp_path / "layer-1"
    for side, body in (("pushed", b"a = 1\nb = 2\n"), ("rebuilt", b"b = 2\na = 1\n")):
        (where / side / "etc").mkdir(parents=True)
        (where / side / "etc" / "gitconfig").write_bytes(body)
    text = tmp_path / "layer-1.diffoscope.txt"
    line = rebuild_files.diffoscope(where, text)
    assert line == f"diffoscope's report on the differing files: {text}", line
    report = text.read_text()
    assert "rebuilt/etc/gitconfig" in report and "Ordering differences only" in report, report


def test_a_path_is_normalised_the_same_way_on_both_sides():
    assert member_path("./etc/x") == member_path("etc/x") == member_path("/etc//x") == "/etc/x"
    assert Path(member_path("a/./b") or "").as_posix() == "/a/b"


@pytest.fixture
def crafted():
    served = Server()
    yield served
    served.shutdown()


def layer_client(served, seconds: float = 30):
    return registry.Registry(registry.ImageRef(served.host, REPO, "latest"), registry.Deadline(seconds, budget=1 << 20))


def test_a_pushed_layer_is_fetched_by_its_digest(crafted, tmp_path):
    blob = gzip.compress(PUSHED)
    digest = crafted.blob(blob)
    got = rebuild_files.fetch_layer(layer_client(crafted), {"digest": digest, "size": len(blob)}, tmp_path / "l")
    assert got.read_bytes() == blob


def test_a_registry_that_sends_more_than_the_layers_size_is_cut_off(crafted, tmp_path):
    """The attack: a small declared layer answered with an endless body, to fill the disk."""
    digest = crafted.blob(b"x" * (3 << 20))
    with pytest.raises(RegistryDataRefused, match="more than the 1,024 bytes"):
        rebuild_files.fetch_layer(layer_client(crafted), {"digest": digest, "size": 1024}, tmp_path / "l")


def test_a_layer_whose_bytes_are_not_its_digest_is_refused(crafted, tmp_path):
    wanted = "sha256:" + "a" * 64
    crafted.routes[f"/v2/{REPO}/blobs/{wanted}"] = (200, {}, b"other bytes")
    with pytest.raises(RegistryDataRefused, match="does not match its digest"):
        rebuild_files.fetch_layer(layer_client(crafted), {"digest": wanted, "size": 11}, tmp_path / "l")


def test_a_layer_past_the_read_budget_is_refused(crafted, tmp_path):
    blob = b"y" * (2 << 20)  # over layer_client's 1 MiB budget, within the declared size
    digest = crafted.blob(blob)
    with pytest.raises(RegistryDataRefused, match="has read over"):
        rebuild_files.fetch_layer(layer_client(crafted), {"digest": digest, "size": len(blob)}, tmp_path / "l")


def test_a_descriptor_without_a_size_is_refused(crafted, tmp_path):
    with pytest.raises(RegistryDataRefused, match="no size"):
        rebuild_files.fetch_layer(layer_client(crafted), {"digest": "sha256:" + "b" * 64}, tmp_path / "l")


def test_the_differing_layers_are_paired_in_order_at_most_three_and_none_when_they_do_not_line_up():
    layers = [{"digest": f"sha256:{i}"} for i in range(5)]
    pushed, rebuilt = ["a", "b", "c", "d", "e"], ["a", "X", "c", "X", "X"]
    assert [(p.n, p.layer, p.pushed_id, p.rebuilt_id) for p in rebuild_files.differing(layers, pushed, rebuilt)] == [
        (2, layers[1], "b", "X"),
        (4, layers[3], "d", "X"),
        (5, layers[4], "e", "X"),
    ]
    assert rebuild_files.differing(layers, pushed, [*rebuilt, "extra"]) == []
    assert rebuild_files.differing(layers[:4], pushed, rebuilt) == []
    assert len(rebuild_files.differing(layers + layers, pushed * 2, ["X"] * 10)) == rebuild_files.MAX_LAYERS


def test_the_layer_reader_reads_exactly_the_declared_layers_behind_a_token_login(crafted, tmp_path):
    """Docker Hub's way, a Bearer login at a token service: its answer is read under the same byte budget as
    the layers, and the budget leaves room for it (it was the declared sizes alone: the last chunk failed)."""
    blob = gzip.compress(PUSHED)
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    token = Server("127.0.0.2")
    try:
        token.routes["/token"] = (200, {"Content-Type": "application/json"}, b'{"token": "' + b"t" * 4000 + b'"}')
        challenge = f'Bearer realm="http://{token.host}/token",service="test"'

        def behind_login(handler):
            if "Authorization" not in handler.headers:
                handler.send_response(401)
                handler.send_header("WWW-Authenticate", challenge)
                handler.send_header("Content-Length", "0")
                handler.end_headers()
                return
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(blob)))
            handler.end_headers()
            handler.wfile.write(blob)

        crafted.routes[f"/v2/{REPO}/blobs/{digest}"] = behind_login
        layer = {"digest": digest, "size": len(blob)}
        reader = rebuild_files.layer_reader(registry.ImageRef(crafted.host, REPO, "latest"), [Pair(1, layer, "a", "b")])
        assert rebuild_files.fetch_layer(reader, layer, tmp_path / "l").read_bytes() == blob
    finally:
        token.shutdown()


def test_a_registry_that_drips_a_layer_is_cut_off_at_the_deadline(crafted, tmp_path):
    """A layer sent a byte at a time is cut off when the reader's deadline passes, not when a whole chunk
    has come (each read waits at most what is left of the deadline)."""
    import time

    digest = "sha256:" + "d" * 64
    crafted.routes[f"/v2/{REPO}/blobs/{digest}"] = drip("application/octet-stream", b"x", every=0.3, count=100)
    started = time.monotonic()
    with pytest.raises(RegistryUnreachable, match="within 2 s"):
        rebuild_files.fetch_layer(layer_client(crafted, seconds=2), {"digest": digest, "size": 100000}, tmp_path / "l")
    assert time.monotonic() - started < 4
