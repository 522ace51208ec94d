"""Signing a pushed digest: its statements, made from its build's report folder (records.Facts,
validation.json, the SBOM) so that a push, `build.py sign` and `sign --prepare` say the same (the
predicates' shapes: pipeline/statements.py), sent to the signer (pipeline/attest.py, a process of its own
that stamps its own run and time) and attached beside the digest (pipeline/referrers.py). `build.py sign`,
`sign --children` and `attach` sign only what records.bind ties to one image and line (docs/supply-chain.md,
"Only what ran is signed").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import requests

from common.cli import atomic_write
from pipeline import attest, push, referrers, registry, statements
from pipeline.build_image import SOURCE
from pipeline.errors import NotVerified, PipelineError, PushFailed, RegistryDataRefused, UsageError
from pipeline.labels import VALIDATION_SHA256, VERSION
from pipeline.records import FACTS, Facts, Proof, Registered, Report, Signable, bind, load, revision, write
from pipeline.statements import Subject, statement
from pipeline.variants import Variant, load_matrix

# --------------------------------------------------------------------------- what is signed


def image_statements(records: Signable, subject: Subject) -> list[dict]:
    """The six statements about one pushed image, from its run's records (the test result and benchmark from
    `records.validation`: the build's own, or with a later proof's outcome)."""
    facts, validation, sbom = records.facts, records.validation, records.sbom
    deps = list(facts.dependencies)
    image_id = facts.stamped_image_id
    locks = [{"name": d["uri"].removeprefix("file:"), "digest": d.get("digest")} for d in deps if d["uri"].startswith("file:")]
    configuration = [
        {"name": "image", "uri": f"{subject.name}@{subject.digest}", "digest": {"sha256": image_id.removeprefix("sha256:")}},
        *locks,
    ]
    audit = validation.get("audit") or {}
    built_on = facts.tools.get("host") or {"machine": "unknown", "system": "unknown"}  # where gather ran, not this signer
    return [
        statement("provenance", subject, statements.provenance_predicate(facts, facts.platform, list(facts.tags), deps, SOURCE)),
        statement("sbom", subject, sbom),
        statement("test-result", subject, statements.test_result_predicate(validation, image_id, configuration, facts.flavor)),
        statement("benchmark", subject, statements.benchmark_predicate(validation, built_on)),
        statement("vulns", subject, statements.vulns_predicate(audit, facts.commit)),
        statement("vex", subject, statements.vex_predicate(audit, f"{subject.name}@{subject.digest}", SOURCE, statements.now())),
    ]


def index_statements(subject: Subject, facts: Facts, tags: list[str], children: list[dict]) -> list[dict]:
    """An index's provenance and the combined test result of its children ({platform, digest, validation})."""
    deps = [{"uri": f"{subject.name}@{c['digest']}", "digest": {"sha256": c["digest"].removeprefix("sha256:")}} for c in children]
    platforms = ",".join(c["platform"] for c in children)
    predicate = statements.index_test_result(subject.name, children, facts.flavor)
    return [
        statement("provenance", subject, statements.provenance_predicate(facts, platforms, tags, deps, SOURCE)),
        statement("test-result", subject, predicate),
    ]


# --------------------------------------------------------------------------- signing and attaching


def sign_digest(
    key: attest.KeySource, client: registry.Registry, digest: str, stmts: list[dict], run_name: str | None = None
) -> dict:
    """Sign the statements as one run and attach them to `digest` (replacing what an earlier run signed);
    the report's record of it. A registry that refuses them fails the push (exit 6)."""
    signed = attest.sign(key, stmts, run_name)
    return attach_signed(client, digest, stmts, signed)


def attach_signed(client: registry.Registry, digest: str, stmts: list[dict], signed: attest.Signatures) -> dict:
    """Attach the signer's envelopes of `stmts` to `digest`, replacing an earlier run's; the report's record."""
    ref = client.ref.name
    try:
        subject = referrers.subject_descriptor(client, digest)
        added = referrers.attach(client, subject, [(s["predicateType"], e) for s, e in zip(stmts, signed.envelopes, strict=True)])
    except (PipelineError, requests.RequestException) as err:
        raise PushFailed(
            f"{ref}@{digest[:19]}… is pushed but the registry did not take its signed statements: {str(err).splitlines()[0][:200]}"
        ) from None
    kinds = [str(statements.kind_of(s["predicateType"])) for s in stmts]
    print(f"==> signed {ref}@{digest[:19]}… with key {signed.keyid[:16]}…: {', '.join(kinds)}", flush=True)
    return {
        "signed": True,
        "keyid": signed.keyid,
        "subject": digest,
        "run": signed.run,
        "signed_at": signed.signed_at,
        "statements": dict(zip(kinds, (d["digest"] for d in added), strict=True)),
    }


@dataclass(frozen=True)
class SignRequest:
    """`build.py sign`, parsed once."""

    ref: registry.ImageRef  # HOST/REPO@sha256:… as the build pushed it
    report: Path  # the build's report.json, its folder beside it
    key: attest.KeySource | None  # None: write the predicates only (`prepare` must be given)
    proof: Path | None = None  # a later proof's proof.json, ran.json beside it; None: the build's own validation
    require_gpu: bool = False
    run_name: str | None = None  # a label for the run (the CI run's URL); the run id is the signer's
    timeout: float = registry.DEFAULT_DEADLINE
    prepare: Path | None = None  # write what signing needs here: statements.json and cosign's predicates


def registered(client: registry.Registry, digest: str) -> Registered:
    """What the registry holds for `digest`: its config's digest and the validation hash stamped into it."""
    found = client.manifest(digest)
    if found is None:
        raise UsageError(f"{client.ref.name}@{digest}: the registry has no such manifest; sign the digest the build pushed")
    what = f"{client.ref.name}@{digest[:19]}…"
    config = registry.config_digest(found[0], what)
    image = registry.as_dict(client.blob(config, registry.MAX_MANIFEST), f"{what}: its config").get("config")
    labels = image.get("Labels") if isinstance(image, dict) else None
    stamped = {k: labels.get(k) for k in (VALIDATION_SHA256, VERSION)} if isinstance(labels, dict) else {}
    text = {k: v if isinstance(v, str) else None for k, v in stamped.items()}
    return Registered(digest, config, text.get(VALIDATION_SHA256), text.get(VERSION))


def check_tags(pushed: Registered, facts: Facts, line: Variant, facts_path: Path) -> None:
    """The tags the signed provenance will name, and `verify` accept the image under: the immutable tag first,
    the one the registry's image is stamped with, then only the line's moving tags (each also in its zstd form,
    and in its per-architecture form for the facts' own platform only); and the commit, the one that
    immutable tag names. Refused otherwise: an edited facts.json would put the proven image under another
    line's tag or another architecture's, or name a commit that did not build it."""
    unzipped = [tag.removesuffix(push.ZSTD_SUFFIX) for tag in facts.tags]
    plain = [push.plain_tag(tag) for tag in unzipped]
    if not plain or pushed.version is None or plain[0] != pushed.version:
        raise NotVerified(
            f"sign refused: {facts_path} names {plain[0] if plain else 'no tag'} first, but {pushed.digest[:19]}… is "
            f"stamped {pushed.version or 'with no version'}: an edited or foreign record"
        )
    other = sorted({tag for tag in plain if tag not in (pushed.version, *line.moving_tags)})
    other += sorted(
        {tag for tag, bare in zip(unzipped, plain, strict=True) if tag not in (bare, push.arch_tag(bare, facts.platform))}
    )
    if other:
        raise NotVerified(
            f"sign refused: {facts_path} names {', '.join(other)}, not tags of line {line.name} on {facts.platform} "
            f"({pushed.version}, {', '.join(line.moving_tags)}): an edited record"
        )
    named = push.IMMUTABLE.match(pushed.version)
    if named is not None and named["rev"] != revision(facts.commit):
        raise NotVerified(
            f"sign refused: {facts_path} names commit {facts.commit[:12]}, but {pushed.digest[:19]}… is stamped "
            f"{pushed.version}, built at {named['rev']}: an edited record"
        )


def sign_command(req: SignRequest) -> list[str]:
    """Sign a digest a build pushed (unsigned, or signed before) from that build's report folder, with its
    own validation or a later proof, only when everything is bound to the one image and line; with
    `prepare`, write cosign's predicates of the same statements (without a key: only those)."""
    ref = req.ref
    if not ref.is_digest:
        raise UsageError(f"{ref}: sign a digest (HOST/REPO@sha256:...), the one the build pushed, not a tag")
    report = Report.load(req.report)
    facts = Facts.load(report.folder / FACTS)
    later = Proof.later(req.proof) if req.proof else None
    client = registry.Registry(ref, registry.Deadline(req.timeout))
    try:
        pushed = registered(client, ref.reference)
    except RegistryDataRefused as err:
        raise UsageError(f"{ref}: {err}") from None
    records, proof = bind(pushed, report, facts, later, req.require_gpu)  # each file read once, from here on
    check_tags(pushed, facts, load_matrix().line(report.line), report.folder / FACTS)
    if req.key is not None:
        attest.check_key(req.key)
    if not proof.own:  # a later proof's outcome in place of the build's own
        validation = {**statements.validation_with_proof(records.validation, proof.raw), "ran_in": proof.ran_in}
        records = replace(records, validation=validation)
    stmts = image_statements(records, Subject(ref.name, ref.reference))
    lines = []
    if req.prepare is not None:
        subject = {
            "name": ref.name,
            "digest": ref.reference,
            "variant": report.line,
            "platform": facts.platform,
            "flavor": facts.flavor,
        }
        extra = {"validation": records.validation, "facts": facts.as_dict()}
        write_prepared(req.prepare, subject, stmts, extra)
        lines.append(
            f"==> {req.prepare}: {PREPARED} for the signer, cosign's predicates of the same statements ({PREDICATES_INDEX})"
        )
    if req.key is not None:
        record = sign_digest(req.key, client, ref.reference, stmts, req.run_name)
        lines.append(
            f"==> {ref}: six statements signed (run {record['run']}, {record['signed_at']}), replacing any an earlier run signed"
        )
    return lines


def index_command(ref: registry.ImageRef, children: list[Path], prepare: Path, timeout: float) -> list[str]:
    """`build.py sign INDEX@DIGEST --children DIR DIR --prepare OUT`: a multi-arch index's two statements
    (provenance, the children's combined test result) prepared from what `sign --prepare` wrote for each of
    its children, only when the index in the registry lists exactly those children, all of one line."""
    if not ref.is_digest:
        raise UsageError(f"{ref}: prepare an index by digest (HOST/REPO@sha256:...), not a tag")
    client = registry.Registry(ref, registry.Deadline(timeout))
    found = client.manifest(ref.reference)
    if found is None or found[1] not in registry.INDEXES:
        raise UsageError(f"{ref}: the registry has no index by that digest")
    listed = {child["digest"] for _, child in registry.index_images(found[0], str(ref))}
    about = []
    for child in children:
        subject = load(child / "subject.json", "child's subject")
        about.append({**subject, "validation": load(child / "validation.json", "child's validation record")})
    named, lines = {str(c.get("digest")) for c in about}, {str(c.get("variant")) for c in about}
    if named != listed or len(lines) != 1 or any(c.get("name") != ref.name for c in about):
        raise NotVerified(
            f"sign refused: {ref} lists {', '.join(sorted(listed))[:200]}, but the prepared children name "
            f"{', '.join(sorted(named))[:200]} of line(s) {', '.join(sorted(lines))}"
        )
    facts_path = children[0] / FACTS
    facts = Facts.read(load(facts_path, "child's run facts"), facts_path)
    first = registered(client, str(about[0].get("digest")))  # the provenance's tags: bound as `sign` binds a child's
    if facts.stamped_image_id != first.config or {facts.line} != lines:
        raise NotVerified(
            f"sign refused: {facts_path} names image {facts.stamped_image_id[:19]}… of line {facts.line}, but its child "
            f"{first.digest[:19]}… is image {first.config[:19]}… of line(s) {', '.join(sorted(lines))}: an edited record"
        )
    check_tags(first, facts, load_matrix().line(facts.line), facts_path)
    tags = [push.plain_tag(t) for t in facts.tags]
    stmts = index_statements(Subject(ref.name, ref.reference), facts, tags, about)
    subject = {"name": ref.name, "digest": ref.reference, "variant": facts.line, "children": sorted(named)}
    write_prepared(prepare, subject, stmts)
    return [f"==> {prepare}: the index's {PREPARED} for the signer and cosign's predicates ({PREDICATES_INDEX})"]


def attach_command(ref: registry.ImageRef, prepared: Path, signed_path: Path, timeout: float) -> list[str]:
    """`build.py attach IMAGE@DIGEST --prepared DIR --signed FILE`: the release's envelopes, signed in a job of
    their own from DIR/statements.json, attached to the digest; each must be a statement DIR prepared for
    it, as the signer stamped it."""
    if not ref.is_digest:
        raise UsageError(f"{ref}: attach to a digest (HOST/REPO@sha256:...), the one that was prepared")
    record = load(prepared / PREPARED, "prepared statements")
    stmts = record.get("statements")
    if record.get("subject", {}).get("digest") != ref.reference or not isinstance(stmts, list) or not stmts:
        raise UsageError(f"{prepared / PREPARED}: not prepared for {ref.reference}")
    answer = load(signed_path, "signer's answer")
    try:
        signed = attest.Signatures.read(answer)
    except (KeyError, TypeError, ValueError):
        raise UsageError(f"{signed_path}: not the signer's answer (keyid, envelopes, run, signed_at)") from None
    if len(signed.envelopes) != len(stmts):
        raise UsageError(f"{signed_path}: {len(signed.envelopes)} envelopes for {len(stmts)} prepared statements")
    for stmt, envelope in zip(stmts, signed.envelopes, strict=True):
        payload = attest.envelope_payload(envelope, f"{signed_path}: an envelope")
        if payload != statements.stamp_run(stmt, signed.run, signed.signed_at, _run_name(payload)):
            raise NotVerified(
                f"{signed_path}: an envelope signs something other than the prepared {statements.kind_of(stmt['predicateType'])} statement"
            )
        if (named := attest.signers_of(json.loads(envelope))) != {signed.keyid}:  # one key named, the one printed below
            raise NotVerified(
                f"{signed_path}: an envelope names key {', '.join(sorted(k[:16] for k in named)) or 'none'}, not the "
                f"answer's {signed.keyid[:16]}…: not one signer's answer"
            )
    client = registry.Registry(ref, registry.Deadline(timeout))
    done = attach_signed(client, ref.reference, stmts, signed)
    return [
        f"==> {ref}: {len(stmts)} statements attached (run {done['run']}, {done['signed_at']}), their envelopes naming key "
        f"{done['keyid'][:16]}… (unchecked here: `build.py verify --key` checks the signatures)"
    ]


def _run_name(stmt: dict) -> str | None:
    subjects = stmt.get("subject") or [{}]
    name = (subjects[0].get("annotations") or {}).get(statements.RUN_NAME_ANNOTATION)
    return name if isinstance(name, str) else None


PREPARED = "statements.json"
PREDICATES_INDEX = "predicates.tsv"


def write_prepared(out: Path, subject: dict, stmts: list[dict], extra: dict[str, dict] | None = None) -> None:
    """OUT/statements.json for the signer; OUT/<kind>.json per statement's predicate, predicates.tsv naming each
    file with its predicate type (what `cosign attest --type URI --predicate FILE` takes), subject.json and the
    extra records (validation.json, facts.json)."""
    write(out / PREPARED, {"subject": subject, "statements": stmts})
    kinds = {str(statements.kind_of(s["predicateType"])): s for s in stmts}
    for name, record in {**{k: s["predicate"] for k, s in kinds.items()}, "subject": subject, **(extra or {})}.items():
        write(out / f"{name}.json", record)
    atomic_write(
        out / PREDICATES_INDEX,
        lambda f: f.write("".join(f"{kinds[k]['predicateType']}\t{k}.json\n" for k in sorted(kinds)).encode()),
    )
