"""The publish path: a validated, stamped image into the registry, and with a signing key its signed
statements beside each pushed digest, before any moving tag names it. It orchestrates; the parts and
the path between them: docs/architecture.md ("The publish path").
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from pipeline import labels, push, registry, run_facts
from pipeline.errors import NotVerified, PipelineError
from pipeline.records import Facts, Signable, write
from pipeline.request import Request
from pipeline.signing import image_statements, index_statements, sign_digest
from pipeline.statements import Subject
from pipeline.target import Tagged, Target

UNSIGNED = {"signed": False, "reason": "unsigned: no --sign-key (or PROVEN_TORCH_SIGN_KEY) was given"}


@dataclass(frozen=True)
class Pushed:
    """What the push did; kept apart from the validation record, which is stamped and never changes."""

    refs: dict[str, str]  # ref -> manifest digest
    sbom: dict  # where the SBOM went, or why it did not; signed, it is one of the statements
    compressed_bytes: dict[str, int]  # per compression pushed ("gzip", "zstd"), as the registry's manifest says
    held_tags: tuple[str, ...] = ()  # moving tags not pushed (--hold-moving-tags): a later step moves them
    signed: tuple[dict, ...] = ()  # sign_digest's record per pushed digest; empty: unsigned
    facts: Facts | None = None  # the run facts this push wrote (facts.json), as the run holds them: the index signs them

    def as_dict(self) -> dict:
        return {
            "refs": self.refs,
            "signatures": list(self.signed) if self.signed else UNSIGNED,
            "sbom": self.sbom,
            "compressed_bytes": self.compressed_bytes,
            "held_tags": list(self.held_tags),
        }


# --------------------------------------------------------------------------- one platform's image


def publish(client, tagged: Tagged, target: Target, request: Request, facts: run_facts.RunFacts) -> Pushed:
    """Push every tag in the chosen compression (push.push_plan: immutable tags first), or with
    hold_moving_tags the immutable ones only. With a key, each pushed digest gets its signed
    statements once its immutable tag is pushed, before any moving tag moves."""
    plan = push.push_plan(request.compression, tagged.tags)
    to_push = [step for step in plan if step[0] == tagged.tags[0] or not request.hold_moving_tags]
    held = tuple(remote for _, remote, _ in plan[len(to_push) :])
    base_image = request.matrix.base_image_for(target.platform)
    deps = run_facts.dependencies(client, target.variant, target.platform, base_image, facts.commit)
    written = run_facts.write_facts(target, tagged.stamped_id, facts, deps, [remote for _, remote, _ in plan])
    refs: dict[str, str] = {}
    signed: list[dict] = []
    zstd_digest = None
    key = request.sign_key
    records: Signable | None = None
    destination = registry.Registry(registry.parse_ref(f"{target.ref}:{tagged.tags[0]}"))  # one session, one login

    def sign_what_is_pushed() -> None:
        assert key is not None and records is not None
        for digest in dict.fromkeys(refs.values()):
            stmts = image_statements(records, Subject(target.ref, digest))
            signed.append(sign_digest(key, destination, digest, stmts))

    try:
        if key:  # refused before anything is pushed, the report saying why
            records = stamped_records(client, tagged, target.run_dir, written)
        for local, remote, form in to_push:
            if key and local != tagged.tags[0] and not signed:  # the first moving tag: sign first
                sign_what_is_pushed()
            if form == "zstd":
                zstd_digest = push.push_tag_zstd(client, tagged.stamped_id, target.ref, local, remote, zstd_digest)
                refs[f"{target.ref}:{remote}"] = zstd_digest
            else:
                refs[f"{target.ref}:{remote}"] = push.push_tag(client, tagged.stamped_id, target.ref, local)
        if key and not signed:
            sign_what_is_pushed()
    except PipelineError as err:
        failed = Pushed(
            refs=refs, sbom={"pushed": False, "reason": "the image push failed"}, compressed_bytes={}, signed=tuple(signed)
        )
        target.write_report(tagged.validated_id, tagged.validation, "validated", tagged.tags, failed, str(err), tagged.stamped_id)
        raise
    first_tag = to_push[0][1]
    if signed:
        sbom_where = {"pushed": True, "signed": True, "statements": [s["statements"]["sbom"] for s in signed]}
    else:
        sbom_file = target.run_dir / tagged.validation.sbom["file"]
        sbom_where = registry.push_sbom(destination, refs[f"{target.ref}:{first_tag}"], sbom_file)
    compressed = {}
    for _, remote, form in to_push:
        if form not in compressed and (size := registry.compressed_bytes(destination, remote)) is not None:
            compressed[form] = size
            print(f"==> compressed size in the registry ({form}): {size / 1e9:.2f} GB", flush=True)
    pushed = Pushed(refs=refs, sbom=sbom_where, compressed_bytes=compressed, held_tags=held, signed=tuple(signed), facts=written)
    if held:
        print(f"==> held back (not pushed): {', '.join(held)}; move them once the pushed digest is proven", flush=True)
    target.write_report(tagged.validated_id, tagged.validation, "pushed", tagged.tags, pushed, stamped_id=tagged.stamped_id)
    return pushed


def stamped_records(client, tagged: Tagged, folder: Path, facts: Facts) -> Signable:
    """What the push signs: the validation record as the run holds it (not validation.json as the folder holds it
    by then), the facts this push wrote, and the SBOM that record names. The record's hash must be the image's
    stamped label: both come from one frozen Validation in this run, and this guard keeps them one should a
    change ever let them part."""
    record = tagged.validation.record()
    label = (client.images.get(tagged.stamped_id).labels or {}).get(labels.VALIDATION_SHA256)
    if hashlib.sha256(record).hexdigest() != label:
        raise NotVerified(
            f"{tagged.stamped_id[:19]}…: the validation record to sign is not the one the image was stamped with: "
            "nothing pushed or signed"
        )
    return Signable.of_run(folder, facts, json.loads(record))


# --------------------------------------------------------------------------- a multi-arch line's index


def publish_index(results: dict[str, tuple[Target, Tagged, Pushed]], request: Request) -> dict[str, str]:
    """The plain tags as one multi-arch index over the per-architecture images just pushed (immutable tag
    first; with a key, the index is signed before any moving tag names it)."""
    first_target, first, first_pushed = results[request.variant.platforms[0]]
    ref = first_target.ref
    if any(tagged.line_tags != first.line_tags for _, tagged, _ in results.values()):
        raise PipelineError("the architectures' images report different torch, CUDA or Python; no multi-arch tag moved")
    children = {
        platform: push.Child(platform, ref, tagged.tags[0], pushed.refs[f"{ref}:{tagged.tags[0]}"], tagged.stamped_id)
        for platform, (_, tagged, pushed) in results.items()
    }
    ordered = push.plan_index(request.variant.platforms, children)
    line_tags = first.line_tags[:1] if request.hold_moving_tags else first.line_tags
    index = {f"{ref}:{line_tags[0]}": push.push_index(ref, line_tags[0], ordered)}
    signed: dict = {}
    if request.sign_key:  # before any moving tag names the index
        about = [
            {"platform": c.platform, "digest": c.digest, "validation": results[c.platform][1].validation.as_dict()}
            for c in ordered
        ]
        assert first_pushed.facts is not None  # publish() writes them before it pushes
        digest = index[f"{ref}:{line_tags[0]}"]
        stmts = index_statements(Subject(ref, digest), first_pushed.facts, first.line_tags, about)
        client = registry.Registry(registry.parse_ref(f"{ref}@{digest}"))
        signed = sign_digest(request.sign_key, client, digest, stmts)
    index |= {f"{ref}:{tag}": push.push_index(ref, tag, ordered) for tag in line_tags[1:]}
    record = {
        "index": index,
        "signatures": signed or UNSIGNED,
        "held_tags": first.line_tags[1:] if request.hold_moving_tags else [],
        "children": [
            {
                "platform": c.platform,
                "tag": c.tag,
                "digest": c.digest,
                "stamped_image_id": c.image_id,
                "validated_on": results[c.platform][1].validation.validated_on,
            }
            for c in ordered
        ],
    }
    write(first_target.run_dir.parent / "index.json", record)
    return index
