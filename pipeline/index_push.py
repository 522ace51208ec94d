"""One tag, several architectures: a multi-arch index (a Docker manifest list) over the per-architecture
images a run validated and pushed, written only when every platform was, each child read back first and
the index after (README, "Two architectures"). The Docker CLI writes and reads it (`docker manifest`,
experimental in 20.10), so any registry the user is logged in to works.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass

from pipeline import hostprocs
from pipeline.errors import PushFailed
from pipeline.registry import parse_ref
from pipeline.variants import PLATFORMS, arch


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
    if done.timed_out:
        raise PushFailed(
            f"{what}: the docker CLI did not finish within {done.deadline:.0f} s and was stopped; check the registry"
        )
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise PushFailed(f"{what} failed: {reason}; check the registry and your login (`docker login`)")
    return done.stdout


def _insecure(ref: str) -> list[str]:
    """A registry written as loopback speaks plain HTTP (pipeline.registry's one rule; the CLI needs telling)."""
    return ["--insecure"] if parse_ref(f"{ref}:x").loopback else []


def push_index(ref: str, tag: str, children: list[Child]) -> str:
    """Write ref:tag as an index of `children` (each re-checked first: its pushed manifest's config is the
    validated image), read it back, return its digest."""
    for child in children:
        manifest = json.loads(
            _docker(["manifest", "inspect", *_insecure(child.ref), child.by_digest], f"reading {child.by_digest}")
        )
        config = (manifest.get("config") or {}).get("digest")
        if config != child.image_id:
            raise PushFailed(
                f"{child.by_digest} holds image {str(config)[:19]}, not the validated {child.image_id[:19]}; "
                "refusing to put it in the multi-arch index"
            )
    target = f"{ref}:{tag}"
    insecure = _insecure(ref)
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
