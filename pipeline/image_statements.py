"""What the six statements about a pushed image say (and an index's two), made from the typed records of
its build's report folder (records.Facts, validation.json, the SBOM) and the proof that is signed
(records.Proof): a push, a later `build.py sign` and `build.py sign --prepare` (the release's, and
cosign's predicates) all call these, so they say the same. The predicates' shapes are pipeline/statements.py's."""

from __future__ import annotations

import platform as host
from pathlib import Path

from pipeline import statements
from pipeline.build_image import SOURCE
from pipeline.records import FACTS, VALIDATION, Facts, Proof, load
from pipeline.statements import Subject, statement


def _provenance(facts: Facts, platform: str, tags: list[str], deps: list[dict]) -> dict:
    builder = f"{SOURCE}/blob/{facts.commit.removesuffix('-dirty')}/build.py"
    return statements.provenance_predicate(facts, platform, tags, deps, builder)


def proven_validation(folder: Path, proof: Proof | None = None) -> dict:
    """The validation record the test result is made from: the build's, with a later proof's outcome in
    place of its own when one is given."""
    validation = load(folder / VALIDATION, "validation record")
    if proof is None or proof.own:
        return validation
    return {**statements.validation_with_proof(validation, proof.raw), "ran_in": proof.ran_in}


def image_statements(folder: Path, subject: Subject, proof: Proof | None = None) -> list[dict]:
    """The six statements about one pushed image, from its report folder; `proof`: a later proof of the
    same image (records.Proof.later) in place of the build's own test result and benchmark."""
    facts = Facts.load(folder / FACTS)
    validation = proven_validation(folder, proof)
    sbom_file = (validation.get("sbom") or {}).get("file", "sbom.cdx.json")
    sbom = load(folder / str(sbom_file), "SBOM")
    deps = list(facts.dependencies)
    image_id = facts.stamped_image_id
    locks = [{"name": d["uri"].removeprefix("file:"), "digest": d.get("digest")} for d in deps if d["uri"].startswith("file:")]
    configuration = [
        {"name": "image", "uri": f"{subject.name}@{subject.digest}", "digest": {"sha256": image_id.removeprefix("sha256:")}},
        *locks,
    ]
    audit = validation.get("audit") or {}
    host_facts = {"machine": host.machine(), "system": host.platform()}
    return [
        statement("provenance", subject, _provenance(facts, facts.platform, list(facts.tags), deps)),
        statement("sbom", subject, sbom),
        statement("test-result", subject, statements.test_result_predicate(validation, image_id, configuration, facts.flavor)),
        statement("benchmark", subject, statements.benchmark_predicate(validation, host_facts)),
        statement("vulns", subject, statements.vulns_predicate(audit, facts.commit)),
        statement("vex", subject, statements.vex_predicate(audit, f"{subject.name}@{subject.digest}", SOURCE, statements.now())),
    ]


def index_statements(subject: Subject, facts: Facts, tags: list[str], children: list[dict]) -> list[dict]:
    """An index's provenance and the combined test result of its children ({platform, digest, validation})."""
    deps = [{"uri": f"{subject.name}@{c['digest']}", "digest": {"sha256": c["digest"].removeprefix("sha256:")}} for c in children]
    platforms = ",".join(c["platform"] for c in children)
    predicate = statements.index_test_result(subject.name, children, facts.flavor)
    return [
        statement("provenance", subject, _provenance(facts, platforms, tags, deps)),
        statement("test-result", subject, predicate),
    ]
