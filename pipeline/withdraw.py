"""`build.py withdraw IMAGE@DIGEST`: a pushed digest whose proof failed, removed with every tag naming it
(registries delete by digest) and the statement artifacts about it."""

from __future__ import annotations

from pipeline import referrers, registry
from pipeline.errors import PushFailed, UsageError


def withdraw(ref: registry.ImageRef, timeout: float = registry.DEFAULT_DEADLINE) -> list[str]:
    """Delete the manifest, then the artifacts listed for it whose own manifest names it (best effort: the
    image itself is what mattered), and the tag-schema index of them."""
    if not ref.is_digest:
        raise UsageError(f"{ref}: withdraw a digest (HOST/REPO@sha256:...); a tag may already name another image")
    client = registry.Registry(ref, registry.Deadline(timeout))
    listed = client.referrers(ref.reference)
    with client.delete_manifest(ref.reference) as gone:
        status = gone.status_code
    if status not in (200, 202, 404):
        raise PushFailed(
            f"the registry {ref.host} answered {status} to deleting {ref.reference}: it does not let clients delete "
            "manifests (GHCR: delete the package version with the GitHub API, as .github/workflows/release.yml does)"
        )
    removed = referrers.delete_about(client, ref.reference, listed)
    tagged = client.manifest(registry.fallback_tag(ref.reference))
    if tagged is not None:
        client.delete_manifest(tagged[2]).close()
    said = "was already gone" if status == 404 else "is deleted, with every tag that named it"
    return [f"==> {ref}: {said}; {removed} of the {len(listed)} artifact(s) listed for it deleted"]
