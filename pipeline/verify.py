"""`build.py verify IMAGE_REF --key PUBKEY`: is this pushed image the one that was proven?

For the digest the tag names now (each child too, for an index): every statement signed with the
key verifies; each one is about that digest; all six are there (an index: provenance and test
result); the test result is PASSED, or WARNED only because GPU checks did not run (never with
--require-gpu); the proof's image is the image's config digest. Any failure: NotVerified (exit 1)
naming the statement and why. Then one screen of what was proven, where, when, from what.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from pipeline import referrers, signing
from pipeline.errors import NotVerified
from pipeline.labels import PREFIX
from pipeline.statements import GPU_TESTS, INDEX_KINDS, PREDICATES, STATEMENT_TYPE, kind_of

IMAGE_KINDS = tuple(PREDICATES)
VALIDATION_LABEL = f"{PREFIX}validation"


def _signers(envelope: bytes) -> set[str]:
    try:
        return {str(s.get("keyid", "")) for s in json.loads(envelope).get("signatures", []) if isinstance(s, dict)}
    except (ValueError, AttributeError, TypeError):
        return set()


def signed_statements(
    registry: referrers.Registry, digest: str, key, kinds: tuple[str, ...], label: str, unsigned_why=lambda: ""
) -> dict[str, dict]:
    """The newest statement of each kind about `digest` signed with `key`, every one checked."""
    found = referrers.envelopes_about(registry, digest)
    if not found:
        raise NotVerified(
            f"{label}: no signed statements are attached to {digest}: "
            + (unsigned_why() or "pushed unsigned, or not by this pipeline")
        )
    ours = [(d, env) for d, env in found if key.keyid in _signers(env)]
    if not ours:
        others = sorted({k[:16] for _, env in found for k in _signers(env)})
        raise NotVerified(
            f"{label}: none of its {len(found)} statements is signed by key {key.keyid[:16]}… "
            f"(they name key {', '.join(others) or 'none'}…): the wrong public key, or signed by someone else"
        )
    newest: dict[str, tuple[str, dict]] = {}
    for descriptor, envelope in ours:
        announced = descriptor.get("annotations", {}).get(referrers.PREDICATE_ANNOTATION, "?")
        stmt = signing.open_envelope(envelope, key, f"{label}: the {kind_of(str(announced)) or announced} statement")
        kind = kind_of(str(stmt.get("predicateType", "")))
        subjects = stmt.get("subject")
        if stmt.get("_type") != STATEMENT_TYPE or not isinstance(subjects, list) or len(subjects) != 1:
            raise NotVerified(f"{label}: a signed {kind or 'unknown'} statement is not an in-toto v1 statement about one subject")
        about = {f"{algo}:{value}" for algo, value in (subjects[0].get("digest") or {}).items()}
        if digest not in about:
            raise NotVerified(
                f"{label}: the signed {kind or stmt.get('predicateType')} statement is about {', '.join(sorted(about)) or 'nothing'}, "
                f"not {digest}: copied from another image"
            )
        created = str(descriptor.get("annotations", {}).get(referrers.CREATED_ANNOTATION, ""))
        if kind and (kind not in newest or created >= newest[kind][0]):
            newest[kind] = (created, stmt)
    missing = [k for k in kinds if k not in newest]
    if missing:
        raise NotVerified(f"{label}: no signed {', '.join(missing)} statement about {digest}")
    return {k: stmt for k, (_, stmt) in newest.items()}


def judge_result(test: dict, require_gpu: bool, label: str) -> None:
    """PASSED; WARNED only for GPU checks that did not run, and not with --require-gpu."""
    result = test.get("result")
    warned = list(test.get("warnedTests", []))
    if result == "PASSED":
        return
    if result == "WARNED":
        gpu_only = all(t.split("/", 1)[-1] in GPU_TESTS or t in GPU_TESTS for t in warned)
        if not gpu_only:
            others = [t for t in warned if t not in GPU_TESTS and t.split("/", 1)[-1] not in GPU_TESTS]
            raise NotVerified(f"{label}: the test result is WARNED for {', '.join(others)}, which are not GPU checks")
        if require_gpu:
            raise NotVerified(
                f"{label}: proven on the CPU only (WARNED: {', '.join(warned)} did not run), and --require-gpu was given"
            )
        return
    raise NotVerified(
        f"{label}: the signed test result is {result}: failed {', '.join(test.get('failedTests', [])) or 'unknown tests'}"
    )


def lapsed(vulns: dict, today: dt.date) -> list[str]:
    """Advisories the signed audit accepted only until a date that has passed."""
    out = []
    for result in vulns.get("scanner", {}).get("result", []):
        notes = [a for a in result.get("annotations", []) if isinstance(a, dict)]
        expires = next((str(a["expires"]) for a in notes if a.get("expires")), None)
        if expires and expires < today.isoformat():
            out.append(f"{result.get('id')} (accepted until {expires})")
    return out


def check_image(registry: referrers.Registry, digest: str, body: bytes, key, require_gpu: bool, label: str) -> dict:
    config = (json.loads(body).get("config") or {}).get("digest")
    if not isinstance(config, str) or not referrers.DIGEST.fullmatch(config):
        raise NotVerified(f"{label}: the image manifest names no config digest")

    def forged_labels() -> str:
        """An image whose labels say it passed, with nothing signed behind them: relabelled or foreign."""
        try:
            labels = json.loads(registry.blob(config)).get("config", {}).get("Labels") or {}
        except (NotVerified, ValueError):
            return ""
        if labels.get(VALIDATION_LABEL) == "passed":
            return f"its label {VALIDATION_LABEL}=passed is backed by no signature (labels can be written by anyone): a relabelled or foreign image"
        return ""

    stmts = signed_statements(registry, digest, key, IMAGE_KINDS, label, forged_labels)
    test = stmts["test-result"]["predicate"]
    judge_result(test, require_gpu, label)
    gone = lapsed(stmts["vulns"]["predicate"], dt.date.today())
    if gone:
        raise NotVerified(f"{label}: accepted advisories have lapsed: {', '.join(gone)}; rebuild it with a fresh audit")
    if test.get("imageId") != config:
        raise NotVerified(
            f"{label}: the proof ran in image {str(test.get('imageId'))[:19]}…, but {digest[:19]}… is image {str(config)[:19]}…"
        )
    return summary(digest, stmts)


def verify(image_ref: str, key_path: Path, require_gpu: bool = False) -> dict:
    """Everything checked, as a record (verified: True); NotVerified at the first thing that does not hold.
    Whatever the registry holds, malformed data is a one-line NotVerified, never a traceback."""
    key = signing.load_public_key(key_path)
    ref = referrers.parse_ref(image_ref)
    try:
        return _verify(ref, key, require_gpu)
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as err:
        raise NotVerified(
            f"{ref}: malformed data in the registry ({type(err).__name__}: {str(err)[:120]}); not verified"
        ) from None


def _verify(ref: referrers.ImageRef, key, require_gpu: bool) -> dict:
    registry = referrers.Registry(ref)
    found = registry.manifest(ref.reference)
    if found is None:
        raise NotVerified(f"{ref}: the registry has no such image")
    body, media, digest = found
    images: list[dict] = []
    record: dict = {
        "verified": True,
        "ref": str(ref),
        "digest": digest,
        "keyid": key.keyid,
        "require_gpu": require_gpu,
        "images": images,
    }
    if media in referrers.INDEXES:
        stmts = signed_statements(registry, digest, key, INDEX_KINDS, f"{ref} (index)")
        judge_result(stmts["test-result"]["predicate"], require_gpu, f"{ref} (index)")
        record["index"] = summary(digest, stmts)
        listed = referrers.descriptors(json.loads(body).get("manifests"), f"{ref}'s index")
        vouched = {f"sha256:{c['digest']['sha256']}" for c in stmts["test-result"]["predicate"].get("configuration", [])}
        for child in listed:
            platform = child.get("platform", {})
            name = f"{platform.get('os')}/{platform.get('architecture')}"
            if name == "unknown/unknown":  # BuildKit's attestation manifests are not images
                continue
            child_found = registry.manifest(child["digest"])
            if child_found is None:
                raise NotVerified(f"{ref}: the index names {name} {child['digest'][:19]}…, which the registry does not have")
            if child["digest"] not in vouched:
                raise NotVerified(f"{ref}: the index names {name} {child['digest'][:19]}…, which its signed test result does not")
            images.append(
                {"platform": name, **check_image(registry, child["digest"], child_found[0], key, require_gpu, f"{ref} {name}")}
            )
        if not images:
            raise NotVerified(f"{ref}: the index lists no image to verify")
    else:
        images.append(check_image(registry, digest, body, key, require_gpu, str(ref)))
    return record


def summary(digest: str, stmts: dict[str, dict]) -> dict:
    """What the screen and --json show, from the verified statements only."""
    prov = stmts["provenance"]["predicate"]
    test = stmts["test-result"]["predicate"]
    out = {
        "digest": digest,
        "statements": sorted(stmts),
        "result": test.get("result"),
        "warned": test.get("warnedTests", []),
        "warned_reasons": test.get("warnedReasons", {}),
        "validated_on": test.get("validatedOn"),
        "image_id": test.get("imageId"),
        "line": prov["buildDefinition"]["externalParameters"].get("line"),
        "command": prov["buildDefinition"]["externalParameters"].get("command"),
        "revision": prov["runDetails"]["builder"]["version"].get("build.py"),
        "started": prov["runDetails"]["metadata"].get("startedOn"),
        "finished": prov["runDetails"]["metadata"].get("finishedOn"),
    }
    if "benchmark" in stmts:
        out["benchmark"] = stmts["benchmark"]["predicate"]
    if "vex" in stmts:
        vex = stmts["vex"]["predicate"]
        out["accepted_advisories"] = [
            {
                "id": s["vulnerability"]["name"],
                "package": s["products"][0]["subcomponents"][0]["@id"],
                "why": s.get("action_statement"),
            }
            for s in vex.get("statements", [])
        ]
    if "vulns" in stmts:
        out["advisory_data"] = stmts["vulns"]["predicate"]["scanner"]["db"].get("lastUpdate")
    if "sbom" in stmts:
        out["sbom_components"] = len(stmts["sbom"]["predicate"].get("components", []))
    return out


def screen(record: dict) -> list[str]:
    """One screen: what was proven, where, when, from which revision, the figures, the accepted advisories."""
    lines = [f"VERIFIED {record['ref']}", f"  digest      {record['digest']}", f"  signed by   key {record['keyid'][:16]}…"]
    if "index" in record:
        idx = record["index"]
        lines.append(f"  index       {idx['result']}; {len(record['images'])} image(s), each checked below")
    for image in record["images"]:
        lines += [""] + _image_lines(image)
    return lines


def _image_lines(image: dict) -> list[str]:
    bench = image.get("benchmark") or {}
    where = "GPU" if str(bench.get("device", "cpu")).startswith("cuda") else "CPU"
    result = image["result"] + (
        f": on the {where} only, not run: {', '.join(image['warned'])}" if image["result"] == "WARNED" else f" on the {where}"
    )
    command = " ".join(image.get("command") or [])
    lines = [
        f"  {image.get('platform', 'image')}  {image['digest']}",
        f"    proof       {result}",
        f"    where       {image.get('validated_on')}; host CPU {bench.get('host_cpu') or 'unknown'}"
        + (f"; GPU {bench['gpu_model']}, driver {bench.get('driver')}" if bench.get("gpu_model") else ""),
        f"    image       {image['image_id']} (the image the proof ran in)",
        f"    when        {image['started']} to {image['finished']}",
        f"    from        line {image['line']}, revision {image['revision']}: {command}",
        f"    statements  {', '.join(image['statements'])}; SBOM of {image.get('sbom_components', '?')} components",
    ]
    if bench:
        secs = bench.get("seconds_to_target")
        lines.append(
            f"    figures     {bench.get('environment')} to {bench.get('target_return')} in {bench.get('steps_to_target') or '?'} steps, "
            f"{secs if secs is None else round(secs, 1)} s, {round(bench['steps_per_second']) if bench.get('steps_per_second') else '?'} steps/s "
            f"on {bench.get('device')} (CUDA {bench.get('cuda')})"
        )
    accepted = image.get("accepted_advisories") or []
    lines.append(f"    advisories  {len(accepted)} accepted (advisory data as of {image.get('advisory_data')})")
    lines += [f"      {a['id']} in {a['package']}: {a['why']}" for a in accepted]
    return lines


def verify_and_show(image_ref: str, key_path: Path, require_gpu: bool = False, as_json: bool = False) -> list[str]:
    record = verify(image_ref, key_path, require_gpu)
    return [json.dumps(record, indent=2)] if as_json else screen(record)
