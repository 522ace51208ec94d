"""Signed statements in the registry, beside the image they are about (OCI distribution 1.1), over
the one registry client: each DSSE envelope its own artifact whose `subject` is the image, listed by the
registry's referrers API or else by the tag schema's `sha256-<hex>` index; signing again replaces the
kinds it signs (docs/supply-chain.md, "Where the statements are"). The annotations only help other
tools: `verify` orders statements by the time signed inside them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from pipeline import statements
from pipeline.errors import RegistryDataRefused
from pipeline.registry import DIGEST, OCI_INDEX, OCI_MANIFEST, Registry, artifact, as_dict, fallback_tag

ENVELOPE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
PREDICATE_ANNOTATION = "in-toto.io/predicate-type"  # the name BuildKit's attestations use too
CREATED_ANNOTATION = "org.opencontainers.image.created"


def subject_descriptor(registry: Registry, digest: str) -> dict:
    found = registry.manifest(digest)
    if found is None:
        raise RegistryDataRefused(f"{registry.ref.name} has no manifest {digest}")
    body, media, _ = found
    return {"mediaType": media, "digest": digest, "size": len(body)}


def attach(registry: Registry, subject: dict, envelopes: list[tuple[str, bytes]]) -> list[dict]:
    """Push each (predicate type, DSSE envelope) as an artifact about `subject` (a descriptor); return
    the artifacts' descriptors. Every statement of the same predicate types pushed before for the same
    subject is replaced: dropped from the tag-schema index (other tools' entries kept), or deleted where
    the registry lists referrers itself and lets it."""
    empty = registry.upload(b"{}")
    now = statements.now()
    added: list[dict] = []
    native = False
    for predicate_type, envelope in envelopes:
        layer = registry.upload(envelope)
        annotations = {PREDICATE_ANNOTATION: predicate_type, CREATED_ANNOTATION: now}
        manifest = {**artifact(ENVELOPE_MEDIA_TYPE, empty, layer, subject), "annotations": annotations}
        body = statements.encode(manifest)
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        put = registry.put_manifest(digest, body, OCI_MANIFEST)
        native = native or bool(put.headers.get("OCI-Subject"))
        added.append(
            {
                "mediaType": OCI_MANIFEST,
                "digest": digest,
                "size": len(body),
                "artifactType": ENVELOPE_MEDIA_TYPE,
                "annotations": annotations,
            }
        )
    kinds = {predicate_type for predicate_type, _ in envelopes}
    new = {d["digest"] for d in added}

    def superseded(descriptor: dict) -> bool:
        annotations = descriptor.get("annotations")
        kind = annotations.get(PREDICATE_ANNOTATION) if isinstance(annotations, dict) else None
        return kind in kinds and descriptor["digest"] not in new

    if native:  # the registry lists referrers itself: remove what these replace, where it allows deletes
        listed = registry.referrers(subject["digest"])
    else:  # the index lists the live set; what it no longer lists is deleted where the registry lets clients delete
        listed = registry.tagged_referrers(subject["digest"])
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [d for d in listed if not superseded(d)] + added}
        registry.put_manifest(fallback_tag(subject["digest"]), statements.encode(index), OCI_INDEX)
    delete_about(registry, subject["digest"], [old for old in listed if superseded(old)])
    return added


def artifact_about(registry: Registry, descriptor: dict, digest: str) -> dict:
    """The manifest of an artifact a listing names for `digest`, read back: its own subject must be `digest`
    (a listing is the registry's word; the manifest's subject is what its digest pins). RegistryDataRefused
    otherwise."""
    found = registry.manifest(descriptor["digest"])
    if found is None:
        raise RegistryDataRefused(
            f"the registry lists the artifact {descriptor['digest'][:19]}… for {digest[:19]}… but does not have it"
        )
    manifest = as_dict(found[0], f"the artifact {descriptor['digest'][:19]}…")
    subject = manifest.get("subject")
    about = subject.get("digest") if isinstance(subject, dict) else None
    if about != digest:
        raise RegistryDataRefused(
            f"the artifact {descriptor['digest'][:19]}… listed for {digest[:19]}… is about {str(about or 'nothing')[:19]}…"
        )
    return manifest


def delete_about(registry: Registry, digest: str, listed: list[dict]) -> int:
    """Delete the listed artifacts whose own subject is `digest` (never one a listing only claims is about it);
    how many the registry deleted."""
    deleted = 0
    for descriptor in listed:
        try:
            artifact_about(registry, descriptor, digest)
        except RegistryDataRefused:
            continue
        with registry.delete_manifest(descriptor["digest"]) as gone:
            deleted += gone.status_code in (200, 202)
    return deleted


def envelopes_about(registry: Registry, digest: str) -> Iterator[bytes]:
    """The envelope bytes of each DSSE artifact the registry lists for `digest`, one at a time (the caller
    checks one and drops it before the next is read). The artifact manifest's own subject must be `digest`:
    an index entry pointing elsewhere is refused."""
    for descriptor in registry.referrers(digest):
        if descriptor.get("artifactType") != ENVELOPE_MEDIA_TYPE:
            continue
        manifest = artifact_about(registry, descriptor, digest)
        layers = manifest.get("layers")
        candidates = [x for x in layers if isinstance(x, dict)] if isinstance(layers, list) else []
        layer = next(
            (x for x in candidates if x.get("mediaType") == ENVELOPE_MEDIA_TYPE and isinstance(x.get("digest"), str)), None
        )
        if layer is None or not DIGEST.fullmatch(layer["digest"]):
            raise RegistryDataRefused(f"the statement artifact {descriptor['digest'][:19]}… holds no DSSE envelope")
        yield registry.blob(layer["digest"])
