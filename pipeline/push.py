"""The push decision: tag the validated image, re-check each tag names it, push exactly that
image, immutable tag first. gzip is `docker push`; zstd is skopeo: the validated image's layers
compressed into an OCI layout, the image's own config put back (so the image ID, the diff IDs and the
HEALTHCHECK stay), uploaded, and the registry's manifest read back and checked. A multi-arch line's
plain tags are one index (a Docker manifest list) over the per-architecture images a run validated and
pushed, written only when every platform was, each child read back first and the index after (README,
"Two architectures"); the Docker CLI writes and reads it (`docker manifest`, experimental in 20.10), so
any registry the user is logged in to works. The registry's HTTP API (sizes, the SBOM artifact) is
pipeline/registry.py."""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from common.deadlines import DEADLINES
from pipeline import docker_env, hostprocs
from pipeline.docker_env import sdk_errors
from pipeline.errors import Interrupted, PushFailed, UsageError, ValidationFailed
from pipeline.registry import parse_ref
from pipeline.variants import PLATFORMS, arch

# build.py --compression (cli_text.py says which runtimes pull each); `both` pushes gzip under the plain
# tags, so no runtime meets a tag it cannot pull, and a zstd form of each under ZSTD_SUFFIX.
COMPRESSIONS = ("gzip", "zstd", "both")
ZSTD_SUFFIX = "-zstd"
# An immutable tag (stamp.compute_tags): torch, CUDA and Python, date, revision (records.revision), a flavor's
# name, and a multi-arch line's architecture (arch_tag); the flavor never ends the tag in an architecture's name.
IMMUTABLE = re.compile(
    r"^(?P<stem>.+)-(?P<date>\d{8})-(?P<rev>[0-9a-f]{7}(?:-dirty)?)"
    r"(?P<flavor>-(?!(?:amd64|arm64)$)[a-z][a-z0-9]*)?(?P<arch>-(?:amd64|arm64))?$"
)
ZSTD_LEVEL = 3


def tag_image(client, image_id: str, ref: str, tags: list[str]) -> list[str]:
    """Give the validated image its tags; return the full references."""
    image = client.images.get(image_id)
    refs = []
    for tag in tags:
        if not image.tag(ref, tag=tag):
            raise ValidationFailed(f"docker refused the tag {ref}:{tag}")
        refs.append(f"{ref}:{tag}")
    return refs


def check_tag(client, image_id: str, ref: str, tag: str) -> None:
    """Refuse to push ref:tag when it no longer names the validated image."""
    current = client.images.get(f"{ref}:{tag}").id
    if current != image_id:
        raise PushFailed(f"{ref}:{tag} now names {current[:19]}, not the validated {image_id[:19]}; refusing to push")


def push_plan(compression: str, tags: list[str]) -> list[tuple[str, str, str]]:
    """(local tag, registry tag, compression) in push order: every form's immutable tag
    (tags[0]) before any moving tag, so a push that fails part-way moves nothing."""
    forms = {"gzip": [("", "gzip")], "zstd": [("", "zstd")], "both": [("", "gzip"), (ZSTD_SUFFIX, "zstd")]}[compression]
    return [(tag, tag + suffix, form) for tag in tags for suffix, form in forms]


def push_tag(client, image_id: str, ref: str, tag: str) -> str:
    """Push ref:tag (gzip, docker push) after checking it still names the validated image; return the manifest digest."""
    check_tag(client, image_id, ref, tag)
    print(f"==> push {ref}:{tag}", flush=True)
    start = time.monotonic()
    last_report = 0.0
    digest = ""
    layers: dict[str, str] = {}
    limit = DEADLINES["docker push"]
    try:
        with hostprocs.step(f"the push of {ref}:{tag}"):  # Ctrl-C: pipeline.line says what stays tagged and pushed
            for event in client.images.push(ref, tag=tag, stream=True, decode=True):
                if "error" in event:
                    detail = event.get("errorDetail", {}).get("message") or event["error"]
                    raise PushFailed(
                        f"registry refused the push of {ref}:{tag}: {detail.strip()}; check the registry and your login (`docker login`)"
                    )
                if event.get("id") and event.get("status"):
                    layers[event["id"]] = event["status"]
                digest = event.get("aux", {}).get("Digest", digest)
                now = time.monotonic()
                if now - start > limit:  # the daemon goes on pushing only while someone reads its stream
                    raise PushFailed(f"the push of {ref}:{tag} did not finish within {limit:.0f} s and was abandoned")
                if now - last_report > 10:
                    done = sum(1 for s in layers.values() if s in ("Pushed", "Layer already exists", "Mounted from"))
                    print(f"  [{now - start:6.1f}s] layers done {done}/{len(layers)}", flush=True)
                    last_report = now
    except (PushFailed, Interrupted):
        raise
    except sdk_errors() as err:
        raise PushFailed(
            f"cannot push {ref}:{tag}: {str(err).splitlines()[0][:200]}; is the registry running and reachable?"
        ) from None
    if not digest:
        raise PushFailed(f"push of {ref}:{tag} ended without a digest; the registry did not confirm it")
    print(f"==> pushed {ref}:{tag} ({digest}) in {time.monotonic() - start:.0f}s", flush=True)
    return digest


# --------------------------------------------------------------------------- zstd (skopeo)


def skopeo() -> str:
    exe = shutil.which("skopeo")
    if not exe:
        raise UsageError("--compression zstd/both needs skopeo (Debian: apt-get install skopeo); or push gzip")
    return exe


def _plain_http(ref: str, flag: str) -> list[str]:
    """The CLI flag (skopeo's, `docker manifest`'s) for plain HTTP, only to a registry written as loopback
    (pipeline.registry's one rule)."""
    return [flag] if parse_ref(f"{ref}:x").loopback else []


def exact_config(client, image_id: str) -> bytes:
    """The image's config JSON, byte for byte (its sha256 is the image ID), read from the daemon's
    `docker save` stream (members in name order, so the config comes somewhere among the layers; ID.json
    in Docker 20.10's layout, blobs/sha256/ID in an OCI layout's); the stream is closed once it is found."""
    name = image_id.split(":", 1)[1]
    with docker_env.saved(client, image_id) as archive:
        for member in archive:
            if member.isfile() and Path(member.name).name in (name, f"{name}.json"):
                data = archive.extractfile(member).read()  # type: ignore[union-attr]  # a file member has a body
                if "sha256:" + hashlib.sha256(data).hexdigest() == image_id:
                    return data
    raise PushFailed(f"could not read the exact config of {image_id[:19]} from the Docker daemon")


def _use_exact_config(layout: Path, config: bytes) -> None:
    """Put the image's own config into an OCI layout skopeo wrote (skopeo re-serialises it when it
    converts to OCI, dropping Docker's HEALTHCHECK among others), so the pushed image keeps its ID."""
    blobs = layout / "blobs" / "sha256"
    index = json.loads((layout / "index.json").read_text())
    entry = index["manifests"][0]
    manifest = json.loads((blobs / entry["digest"].split(":", 1)[1]).read_bytes())
    config_hex = hashlib.sha256(config).hexdigest()
    (blobs / config_hex).write_bytes(config)
    manifest["config"] = {
        "mediaType": "application/vnd.oci.image.config.v1+json",
        "digest": f"sha256:{config_hex}",
        "size": len(config),
    }
    data = json.dumps(manifest, separators=(",", ":")).encode()
    manifest_hex = hashlib.sha256(data).hexdigest()
    (blobs / manifest_hex).write_bytes(data)
    entry.update(digest=f"sha256:{manifest_hex}", size=len(data))
    (layout / "index.json").write_text(json.dumps(index))


def _skopeo_copy(args: list[str], what: str, start: float) -> None:
    """Run `skopeo copy ARGS`, streaming its blob lines; one-line PushFailed when it fails or outlives its deadline."""
    tail: list[str] = []

    def show(line: str) -> None:
        tail.append(line.strip())
        del tail[:-5]
        if line.startswith(("Copying blob", "Copying config", "Writing manifest")) and "skipped" not in line:
            print(f"  [{time.monotonic() - start:6.1f}s] {line.strip()[:100]}", flush=True)

    ran = hostprocs.run_host(
        [skopeo(), "copy", "--retry-times", "2", *args], "skopeo copy", what=f"the push of {what}", on_line=show
    )
    if ran.returncode is None:
        raise PushFailed(f"cannot push {what}: skopeo did not finish within {DEADLINES['skopeo copy']:.0f} s and was stopped")
    if ran.returncode != 0:
        detail = next((ln for ln in reversed(tail) if ln), f"skopeo exited {ran.returncode}")
        raise PushFailed(f"cannot push {what}: {detail[:240]}; is the registry running and reachable?")


def push_tag_zstd(client, image_id: str, ref: str, local_tag: str, tag: str, pushed_digest: str | None = None) -> str:
    """Push the image under ref:tag with zstd layers (skopeo); return the manifest digest. The first zstd push
    of a run compresses the daemon's image (its local tag re-checked to name the validated image) into an OCI
    layout with its own config put back; later tags copy that manifest inside the registry (`pushed_digest`),
    so nothing is compressed twice. What the registry then holds is checked (check_zstd_manifest)."""
    check_tag(client, image_id, ref, local_tag)
    print(f"==> push {ref}:{tag} (zstd)", flush=True)
    start = time.monotonic()
    dest = [f"docker://{ref}:{tag}", *_plain_http(ref, "--dest-tls-verify=false")]
    with tempfile.TemporaryDirectory(prefix="proven-torch-zstd-") as tmp:
        digest_file = Path(tmp) / "digest"
        keep_digests = ["--preserve-digests", "--digestfile", str(digest_file)]
        if pushed_digest:
            source = [*_plain_http(ref, "--src-tls-verify=false"), f"docker://{ref}@{pushed_digest}"]
            _skopeo_copy([*keep_digests, *source, *dest], f"{ref}:{tag}", start)
        else:
            layout = Path(tmp) / "layout"
            with concurrent.futures.ThreadPoolExecutor(1) as pool:  # read the config while skopeo compresses
                config = pool.submit(exact_config, client, image_id)
                zstd = ["--format", "oci", "--dest-compress-format", "zstd", "--dest-compress-level", str(ZSTD_LEVEL)]
                _skopeo_copy([*zstd, f"docker-daemon:{ref}:{local_tag}", f"oci:{layout}:image"], f"{ref}:{tag}", start)
                _use_exact_config(layout, config.result())
            _skopeo_copy([*keep_digests, f"oci:{layout}:image", *dest], f"{ref}:{tag}", start)
        digest = digest_file.read_text().strip()
    check_zstd_manifest(client, image_id, ref, digest)
    print(f"==> pushed {ref}:{tag} ({digest}, zstd) in {time.monotonic() - start:.0f}s", flush=True)
    return digest


def check_zstd_manifest(client, image_id: str, ref: str, digest: str) -> None:
    """What the registry holds under `digest` is the validated image: same config, same diff IDs, zstd layers."""
    tls = _plain_http(ref, "--tls-verify=false")

    def inspect(*what: str) -> dict:
        done = hostprocs.run_host([skopeo(), "inspect", *tls, *what, f"docker://{ref}@{digest}"], "skopeo inspect")
        if done.returncode != 0:
            raise PushFailed(f"cannot read back {ref}@{digest}: {done.stderr.strip()[:200]}")
        return json.loads(done.stdout)

    manifest, config = inspect("--raw"), inspect("--config", "--raw")
    expected = client.images.get(image_id).attrs["RootFS"]["Layers"]
    wrong = []
    if manifest["config"]["digest"] != image_id:
        wrong.append(f"config {manifest['config']['digest'][:19]} is not the validated {image_id[:19]}")
    if config["rootfs"]["diff_ids"] != expected:
        wrong.append("its layers' diff IDs differ from the validated image's")
    if not all(layer["mediaType"].endswith("+zstd") for layer in manifest["layers"]):
        wrong.append("not every layer is zstd")
    if wrong:
        raise PushFailed(f"{ref}@{digest} in the registry is not the validated image: {'; '.join(wrong)}")


# --------------------------------------------------------------------------- a multi-arch index


@dataclass(frozen=True)
class Child:
    """One architecture's pushed image: where it is and what it must be."""

    platform: str
    ref: str  # repository reference, e.g. 127.0.0.1:5000/proven-torch
    tag: str  # its per-architecture tag, e.g. 2.11-cu130-arm64
    digest: str  # the manifest digest the push returned
    image_id: str  # the stamped image's ID (sha256:...): the manifest's config digest

    @property
    def by_digest(self) -> str:
        return f"{self.ref}@{self.digest}"


def arch_tag(tag: str, platform: str) -> str:
    """The per-architecture form of a tag: '2.11-cu130' -> '2.11-cu130-arm64'."""
    return f"{tag}-{arch(platform)}"


def plain_tag(tag: str) -> str:
    """The tag an index carries for a per-architecture one: '2.11-cu130-arm64' -> '2.11-cu130'."""
    return next((tag.removesuffix(f"-{arch(p)}") for p in PLATFORMS if tag.endswith(f"-{arch(p)}")), tag)


def plan_index(platforms: tuple[str, ...], pushed: dict[str, Child]) -> list[Child]:
    """The index's children in the line's platform order; refused when a platform was not validated and pushed."""
    missing = [p for p in platforms if p not in pushed]
    if missing:
        raise PushFailed(
            f"no multi-arch index: {', '.join(missing)} was not validated and pushed in this run, so no tag "
            f"naming every platform moved; build with --platform all (per-architecture tags were pushed as such)"
        )
    return [pushed[p] for p in platforms]


def _docker(args: list[str], what: str) -> str:
    exe = os.environ.get("DOCKER_CLI") or shutil.which("docker") or "/usr/bin/docker"
    env = {**os.environ, "DOCKER_CLI_EXPERIMENTAL": "enabled"}  # `docker manifest` in the 20.10 CLI
    done = hostprocs.run_host([exe, *args], "docker manifest", what=what, env=env)
    if done.returncode is None:
        raise PushFailed(
            f"{what}: the docker CLI did not finish within {DEADLINES['docker manifest']:.0f} s and was stopped; check the registry"
        )
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise PushFailed(f"{what} failed: {reason}; check the registry and your login (`docker login`)")
    return done.stdout


def push_index(ref: str, tag: str, children: list[Child]) -> str:
    """Write ref:tag as an index of `children` (each re-checked first: its pushed manifest's config is the
    validated image), read it back, return its digest."""
    for child in children:
        manifest = json.loads(
            _docker(["manifest", "inspect", *_plain_http(child.ref, "--insecure"), child.by_digest], f"reading {child.by_digest}")
        )
        config = (manifest.get("config") or {}).get("digest")
        if config != child.image_id:
            raise PushFailed(
                f"{child.by_digest} holds image {str(config)[:19]}, not the validated {child.image_id[:19]}; "
                "refusing to put it in the multi-arch index"
            )
    target = f"{ref}:{tag}"
    insecure = _plain_http(ref, "--insecure")
    try:  # an unpushed list of that name from an interrupted run would be amended, not replaced
        _docker(["manifest", "rm", target], "clearing a local manifest list")
    except PushFailed:
        pass  # none: the usual case
    _docker(["manifest", "create", *insecure, target, *(c.by_digest for c in children)], f"creating the index {target}")
    for child in children:  # create reads each child's platform from its config; say it outright
        machine = PLATFORMS[child.platform]
        _docker(
            ["manifest", "annotate", "--os", "linux", "--arch", machine["arch"], target, child.by_digest],
            f"annotating {child.platform} in {target}",
        )
    print(f"==> push multi-arch index {target} ({', '.join(c.platform for c in children)})", flush=True)
    out = _docker(["manifest", "push", "--purge", *insecure, target], f"pushing the index {target}")
    digest = out.strip().splitlines()[-1].strip() if out.strip() else ""
    listed = json.loads(_docker(["manifest", "inspect", *insecure, target], f"reading back {target}"))
    found = {(m["platform"]["architecture"], m["digest"]) for m in listed.get("manifests", [])}
    want = {(arch(c.platform), c.digest) for c in children}
    if found != want:
        raise PushFailed(f"{target} lists {sorted(found)}, not the pushed {sorted(want)}; the registry rewrote the index")
    if not digest.startswith("sha256:"):
        raise PushFailed(f"pushing the index {target} ended without a digest; the registry did not confirm it")
    print(f"==> pushed {target} ({digest}): " + ", ".join(f"{c.platform} {c.digest[:19]}" for c in children), flush=True)
    return digest
