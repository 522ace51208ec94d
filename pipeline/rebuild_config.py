"""What makes two builds of one revision the same image (docs/supply-chain.md, "Rebuild it yourself").

The layers are made the same in the Dockerfile (pipeline/render.py: each RUN sets the time of what it
wrote to an epoch). This module does the rest:
- `epochs`: the epochs a build passes, each the commit time of its layers' inputs, so a commit that
  changes only the project's files leaves the multi-gigabyte pip layers (and the cache) alone;
- `normalise`: BuildKit 0.8 (Docker 20.10) stamps the config and every history entry with its clock and
  has no SOURCE_DATE_EPOCH. The config is written again from the built image's own (its settings,
  platform, layers, history), every time the build's epoch, and loaded as a config-only image: Docker
  has every layer already and reads none (`docker load` looks a layer up by its chain ID before it
  opens the layer's file), so this takes well under a second for any image.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import tarfile
from pathlib import Path

from pipeline import hostprocs
from pipeline.errors import BuildFailed
from pipeline.lock import lock_dir
from pipeline.variants import REPO_ROOT, Variant

# The build arguments, and what each one's time is taken from (relative to the repository root).
SYSTEM_EPOCH = "SOURCE_DATE_EPOCH"  # the OS, the user, the venv, the pip layers: the line's lock files
FILES_EPOCH = "FILES_EPOCH"  # the project's own files in the image (.dockerignore lets only these in)
FILES = ("container", "common", "smoke", "ppo_bench", "rlhf_bench", "notebooks", "images/expect")
_LAYER_INSTRUCTIONS = ("RUN ", "COPY ", "ADD ")  # history entries that make a layer, of no bytes too
_MAYBE_LAYER = "WORKDIR "  # BuildKit makes a layer for it (of folders only), or none


def _commit_time(paths: list[str], root: Path) -> int | None:
    done = hostprocs.run_host(["git", "-C", str(root), "log", "-1", "--format=%ct", "--", *paths], "git")
    out = done.stdout.strip() if done.returncode == 0 else ""
    return int(out) if out.isdigit() else None


def epochs(variant: Variant, root: Path = REPO_ROOT) -> dict[str, str]:
    """The build's epochs as build arguments, from the history of the checkout at `root` (a rebuild's
    worktree of an older revision, too), or {} outside a git checkout (the build is then not
    reproducible, and says so). A line without a lock takes images/variants.toml's time."""
    locks = str(lock_dir(variant).parent.relative_to(REPO_ROOT))
    system = _commit_time([locks], root) or _commit_time(["images/variants.toml"], root)
    files = _commit_time(list(FILES), root)
    if system is None or files is None:
        return {}
    return {SYSTEM_EPOCH: str(system), FILES_EPOCH: str(files)}


def created(args: dict[str, str]) -> str | None:
    """The image's creation time (its config and its created label) from a build's arguments: its newest
    input's epoch, RFC 3339; None without epochs."""
    times = [int(args[key]) for key in (SYSTEM_EPOCH, FILES_EPOCH) if key in args]
    return dt.datetime.fromtimestamp(max(times), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if times else None


def config_bytes(attrs: dict, history: list[dict], when: str) -> bytes:
    """The image's config, written again: `attrs` (docker image inspect) and `history` (the Engine's, newest
    first) with every time `when`. A history entry makes a layer when it has bytes or is a RUN, COPY or ADD;
    the WORKDIRs all do or none does, whichever the layer count says; any other count is refused rather
    than guessed (the Engine's history does not say which entries are empty)."""
    layers = attrs["RootFS"]["Layers"]
    entries, maybe = [], []
    for item in reversed(history):
        entry = {"created": when, "created_by": item.get("CreatedBy", "")}
        if item.get("Comment"):
            entry["comment"] = item["Comment"]
        if not item.get("Size") and not entry["created_by"].startswith(_LAYER_INSTRUCTIONS):
            entry["empty_layer"] = True
            maybe += [entry] if entry["created_by"].startswith(_MAYBE_LAYER) else []
        entries.append(entry)
    if sum(1 for e in entries if not e.get("empty_layer")) + len(maybe) == len(layers):
        for entry in maybe:
            del entry["empty_layer"]
    if sum(1 for e in entries if not e.get("empty_layer")) != len(layers):
        raise BuildFailed(
            f"the built image's history does not match its {len(layers)} layers; cannot make its config reproducible "
            "(report this with the Dockerfile)"
        )
    config = {
        "architecture": attrs["Architecture"],
        "os": attrs["Os"],
        **({"variant": attrs["Variant"]} if attrs.get("Variant") else {}),
        "created": when,
        "config": attrs["Config"],
        "rootfs": {"type": "layers", "diff_ids": layers},
        "history": entries,
    }
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def _config_only_archive(config: bytes, layer_count: int) -> bytes:
    """A `docker load` archive of the config alone: the manifest names layer files the archive lacks,
    which Docker does not open for layers it has."""
    name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = [{"Config": name, "RepoTags": None, "Layers": [f"{i}/layer.tar" for i in range(layer_count)]}]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for member, data in ((name, config), ("manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def normalise(client, image_id: str, when: str) -> str:
    """The built image with its config written again (config_bytes), loaded into Docker; its ID. The
    image BuildKit made is removed (the layers stay: the new image holds them)."""
    attrs = client.images.get(image_id).attrs
    config = config_bytes(attrs, client.api.history(image_id), when)
    new_id = "sha256:" + hashlib.sha256(config).hexdigest()
    for _ in client.api.load_image(_config_only_archive(config, len(attrs["RootFS"]["Layers"]))):
        pass
    loaded = client.images.get(new_id).attrs
    if loaded["RootFS"]["Layers"] != attrs["RootFS"]["Layers"]:
        raise BuildFailed(f"the reproducible config of {image_id[:19]} changed its layers; refusing it")
    if new_id != image_id:
        client.images.remove(image_id, noprune=True)
    return new_id
