"""The files behind a layer that a rebuild did not reproduce (`build.py rebuild`, issue 47): which paths
differ and how, the differing files copied out side by side, and diffoscope's report on them.

The pushed layer is read from the registry by its digest (its size and digest checked, then
uncompressed; its uncompressed digest must be the diff_id the config names); the rebuilt one from
`docker save` of the rebuilt image, each layer known by the digest of its tar, which is its diff_id.
Both are untrusted archives: member names are only compared, and a differing file is written out only
under its own folder (no absolute path, no `..`, no link followed), at most MAX_FILES files of at most
MAX_FILE_BYTES each.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Protocol, cast

from common.deadlines import DEADLINES
from pipeline import docker_env, hostprocs, registry
from pipeline.errors import RegistryDataRefused
from pipeline.registry import chunks as registry_chunks

MAX_LAYERS = 3  # differing layers whose files are named (each is read from the registry and from `docker save`)
MAX_MEMBERS = 2_000_000  # files in one layer (the torch layer has about 20,000)
MAX_FILES = 50  # differing files copied out for diffoscope
MAX_FILE_BYTES = 16 << 20  # a differing file larger than this is named, not copied
SHOWN = 8  # differing paths printed; all of them go to the report folder
GZIP, ZSTD = "gzip", "zstd"


class Readable(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


@dataclass(frozen=True)
class Entry:
    """What a layer says of one path: its kind, mode, owner, time, size, and content (the sha256 of a
    file's bytes, a link's target)."""

    kind: str
    mode: int
    owner: str
    mtime: int
    size: int
    content: str


KINDS = {tarfile.REGTYPE: "file", tarfile.AREGTYPE: "file", tarfile.DIRTYPE: "folder", tarfile.SYMTYPE: "symlink"}


def member_path(name: str) -> str | None:
    """A member's path as /a/b, or None for a name that would leave the layer's root."""
    parts = [p for p in PurePosixPath(name.lstrip("/")).parts if p not in ("", ".")]
    return "/" + "/".join(parts) if parts and ".." not in parts else None


class Hashing:
    """A reader that hashes what passes through it (a layer's tar: its digest is its diff_id)."""

    def __init__(self, raw: Readable) -> None:
        self.raw, self.sha = raw, hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.sha.update(data)
        return data

    def digest(self) -> str:
        while self.read(1 << 20):  # tarfile stops at the end-of-archive blocks; the padding counts too
            pass
        return "sha256:" + self.sha.hexdigest()


def walk(stream: Readable, keep: dict[str, Entry] | None = None, out: Path | None = None) -> dict[str, Entry]:
    """Every path of a layer's tar stream and what it holds. With `keep` (the other side's entries) and
    `out`, each regular file whose content differs from `keep`'s is also written under `out`."""
    found: dict[str, Entry] = {}
    copied = 0
    with tarfile.open(fileobj=cast(IO[bytes], stream), mode="r|") as tar:
        for n, member in enumerate(tar):
            if n == MAX_MEMBERS:
                raise RegistryDataRefused(f"a layer holds more than {MAX_MEMBERS} files")
            path = member_path(member.name)
            if path is None:
                continue
            kind = KINDS.get(member.type, "hardlink" if member.islnk() else "other")
            content = member.linkname
            if member.isfile():
                sha = hashlib.sha256()
                small = member.size <= MAX_FILE_BYTES and out is not None
                body = bytearray()
                reader = tar.extractfile(member)
                assert reader is not None  # a regular file always has a body
                while chunk := reader.read(1 << 20):
                    sha.update(chunk)
                    if small:
                        body += chunk
                content = sha.hexdigest()
                other = (keep or {}).get(path)
                if out is not None and small and copied < MAX_FILES and (other is None or other.content != content):
                    copied += write_under(out, path, bytes(body))
            owner = f"{member.uid}:{member.gid}"
            found[path] = Entry(kind, member.mode, owner, int(member.mtime), member.size, content)
    return found


def write_under(root: Path, path: str, body: bytes) -> int:
    """Write `body` as root/path (path from member_path: no `..`); 1 when written, 0 when a folder on
    the way is a link or not a folder (never followed), or something is there already."""
    target = root / path.lstrip("/")
    folder = root
    for part in PurePosixPath(path.lstrip("/")).parent.parts:
        folder = folder / part
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            return 0
        folder.mkdir(exist_ok=True)
    try:  # a name the layer gives twice, or a folder already there by that name: the first stays
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except OSError:
        return 0
    with os.fdopen(fd, "wb") as f:
        f.write(body)
    return 1


def differences(pushed: dict[str, Entry], rebuilt: dict[str, Entry]) -> list[str]:
    """One line per differing path, sorted: only on one side, or what differs ('content, 1,204 vs
    1,208 bytes', 'mtime 1700000000 vs 1700000001', 'mode 0o644 vs 0o600', ...)."""
    lines = []
    for path in sorted(pushed.keys() | rebuilt.keys()):
        a, b = pushed.get(path), rebuilt.get(path)
        if a is None or b is None:
            lines.append(f"{path}: only in the {'rebuilt' if a is None else 'pushed'} layer")
            continue
        what = []
        if a.kind != b.kind:
            what.append(f"a {a.kind} vs a {b.kind}")
        elif a.content != b.content:
            what.append(f"content, {a.size:,} vs {b.size:,} bytes" if a.kind == "file" else f"target {a.content} vs {b.content}")
        what += [f"mode {oct(a.mode)} vs {oct(b.mode)}"] if a.mode != b.mode else []
        what += [f"owner {a.owner} vs {b.owner}"] if a.owner != b.owner else []
        what += [f"mtime {a.mtime} vs {b.mtime}"] if a.mtime != b.mtime else []
        if what:
            lines.append(f"{path}: {', '.join(what)}")
    return lines


def compression(media_type: str) -> str:
    return ZSTD if "zstd" in media_type else GZIP


@contextlib.contextmanager
def uncompressed(blob: Path, kind: str) -> Iterator[Readable]:
    """The layer's tar as a stream: gzip through Python, zstd through the zstd tool."""
    if kind == GZIP:
        with gzip.open(blob, "rb") as f:
            yield f
        return
    zstd = shutil.which("zstd")
    if zstd is None:
        raise RegistryDataRefused("the pushed layer is zstd-compressed and no `zstd` is on PATH to read it (apt install zstd)")
    with subprocess.Popen([zstd, "-dcq", "--", str(blob)], stdout=subprocess.PIPE, env=hostprocs.host_env()) as proc:
        assert proc.stdout is not None
        try:
            yield proc.stdout
        finally:
            proc.kill()


def fetch_layer(registry, layer: dict, dest: Path) -> Path:
    """The pushed layer blob `layer` (a manifest descriptor) into `dest`, at most its declared size,
    its digest checked."""
    digest, size = str(layer.get("digest", "")), layer.get("size")
    if not isinstance(size, int) or size < 0:
        raise RegistryDataRefused(f"the pushed manifest gives layer {digest[:19]}… no size")
    sha, got, what = hashlib.sha256(), 0, f"the layer {digest[:19]}…"
    resp = registry.request("GET", f"blobs/{digest}", what, stream=True)
    with resp, open(dest, "wb") as f:
        if not resp.ok:
            raise registry.refused(resp, what)
        for chunk in registry_chunks(resp, what, registry.deadline, 1 << 20):  # the client's deadline and budget
            got += len(chunk)
            if got > size:
                raise RegistryDataRefused(f"the registry sent more than the {size:,} bytes of {what}")
            sha.update(chunk)
            f.write(chunk)
    if "sha256:" + sha.hexdigest() != digest:
        raise RegistryDataRefused(f"the registry's {what} does not match its digest")
    return dest


def pushed_side(blob: Path, pair: Pair, keep: dict[str, Entry] | None = None, out: Path | None = None) -> dict[str, Entry]:
    """The pushed layer's entries (with `out`: its files that differ from `keep` written there), its
    uncompressed digest checked against the config's diff_id."""
    with uncompressed(blob, compression(str(pair.layer.get("mediaType", "")))) as stream:
        hashing = Hashing(stream)
        found = walk(hashing, keep, out)
        if hashing.digest() != pair.pushed_id:
            raise RegistryDataRefused(f"the pushed layer {pair.n} uncompresses to other bytes than its diff_id")
    return found


def saved_layers(docker, image_id: str) -> Iterator[tuple[str, Readable]]:
    """(member name, stream) of each layer tar in `docker save` of `image_id`: Docker 20.10's ID/layer.tar,
    or every blob of the OCI layout Docker 25 writes (its configs among them: rebuilt_side finds a layer by
    its digest)."""
    with docker_env.saved(docker, image_id) as outer:
        for member in outer:
            layer = member.name.endswith("/layer.tar") or member.name.startswith("blobs/sha256/")
            body = outer.extractfile(member) if layer and member.isfile() else None
            if body is not None:
                yield member.name, body


def rebuilt_side(docker, image_id: str, pair: Pair, keep: dict[str, Entry], out: Path) -> dict[str, Entry]:
    """The rebuilt image's layer (the one whose tar's digest is its diff_id: one pass to find it, one to
    read it), its files that differ from `keep` written under `out`."""
    name = next((name for name, body in saved_layers(docker, image_id) if Hashing(body).digest() == pair.rebuilt_id), None)
    for member, body in saved_layers(docker, image_id):
        if member == name:
            return walk(body, keep, out)
    raise RegistryDataRefused(f"`docker save` of {image_id[:19]} has no layer {pair.rebuilt_id[:19]}…")


@dataclass(frozen=True)
class Pair:
    """Layer `n` (from 1) as pushed (its manifest descriptor and diff_id) and as rebuilt (its diff_id)."""

    n: int
    layer: dict
    pushed_id: str
    rebuilt_id: str


def differing(layers: tuple[dict, ...] | list[dict], pushed_ids: list[str], rebuilt_ids: list[str]) -> list[Pair]:
    """The first MAX_LAYERS layers that differ, paired (the pushed manifest's descriptors in its config's
    order); none when the two images do not have the same number of layers (no pairing to trust)."""
    if not len(layers) == len(pushed_ids) == len(rebuilt_ids):
        return []
    every = zip(layers, pushed_ids, rebuilt_ids, strict=True)
    return [Pair(n, layer, a, b) for n, (layer, a, b) in enumerate(every, 1) if a != b][:MAX_LAYERS]


def layer_reader(ref: registry.ImageRef, pairs: list[Pair]) -> registry.Registry:
    """A client of `ref`'s registry for the pairs' pushed layers: one deadline, and a byte budget of their
    declared sizes plus one token service's answer (a login is read under the same budget)."""
    size = sum(p.layer["size"] for p in pairs if isinstance(p.layer.get("size"), int))
    return registry.Registry(ref, registry.Deadline(DEADLINES["layer read"], budget=size + registry.MAX_MANIFEST))


def name_files(ref: registry.ImageRef, docker, image_id: str, pairs: list[Pair], out: Path) -> list[str]:
    """For each pair, the lines naming the files that differ (layer_report), the pushed layers read from
    `ref`'s registry (layer_reader)."""
    reader = layer_reader(ref, pairs)
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for pair in pairs:
        print(f"==> reading layer {pair.n} of both images to name the files that differ (into {out})", flush=True)
        lines += [f"in layer {pair.n}:", *layer_report(reader, docker, image_id, pair, out)]
    return lines


def layer_report(registry, docker, image_id: str, pair: Pair, folder: Path) -> list[str]:
    """The lines naming what differs inside one layer pair, the pushed image's through `registry` and the
    rebuilt `image_id`'s through `docker`; folder/layer-N.txt lists every differing path, folder/layer-N/
    holds the differing files of each side, and folder/layer-N.diffoscope.txt diffoscope's report on them."""
    where = folder / f"layer-{pair.n}"
    for side in ("pushed", "rebuilt"):
        (where / side).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        blob = fetch_layer(registry, pair.layer, Path(tmp) / "layer")
        pushed = pushed_side(blob, pair)
        rebuilt = rebuilt_side(docker, image_id, pair, pushed, where / "rebuilt")
        pushed_side(blob, pair, rebuilt, where / "pushed")
    found = differences(pushed, rebuilt)
    (folder / f"layer-{pair.n}.txt").write_text("".join(f"{line}\n" for line in found))
    lines = [f"    {line}" for line in found[:SHOWN]]
    lines += [f"    … {len(found) - SHOWN} more in {folder / f'layer-{pair.n}.txt'}"] if len(found) > SHOWN else []
    return lines + [f"    {diffoscope(where, folder / f'layer-{pair.n}.diffoscope.txt')}"]


def diffoscope(where: Path, text: Path) -> str:
    """diffoscope's text report on where/pushed against where/rebuilt, where diffoscope is installed (the
    host venv has it); the line that says where to look."""
    if not any(p.is_file() for p in where.rglob("*")):  # a whiteout, a time, a mode: nothing whose bytes differ was copied out
        return "no file's bytes differ (only times, modes, owners or which files exist): nothing for diffoscope"
    tool = shutil.which("diffoscope", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if tool is None:
        return f"the differing files are in {where} (install diffoscope for a report on them)"
    argv = [tool, "--no-progress", "--exclude-directory-metadata=recursive", "--text", str(text), str(where / "pushed")]
    done = hostprocs.run_host([*argv, str(where / "rebuilt")], "diffoscope")  # its process tree, its deadline, Ctrl-C
    if done.returncode is None:
        return f"diffoscope ran past {DEADLINES['diffoscope']:g} s; the differing files are in {where}"
    if done.returncode == 0:  # diffoscope writes no report for files it finds the same
        return f"diffoscope finds the files copied out to {where} the same"
    return f"diffoscope's report on the differing files: {text}"
