"""Signing a push: the statements about each pushed digest (pipeline.statements), signed with the
user's key (pipeline.signing) and attached beside it in the registry (pipeline.referrers).

pipeline.run calls `attest_image` after an image's immutable tag is pushed and before any moving
tag moves, and `attest_index` for a multi-arch line's index.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import platform as host
from dataclasses import dataclass
from pathlib import Path

from pipeline import hostprocs, lock, referrers, signing, statements
from pipeline.build_image import SOURCE
from pipeline.errors import PipelineError, PushFailed
from pipeline.render import dockerfile_path
from pipeline.statements import Subject
from pipeline.variants import REPO_ROOT, Variant


@dataclass(frozen=True)
class RunFacts:
    """What provenance says about the run, gathered once: the command, the source, the tools."""

    command: list[str]
    commit: str  # the full git commit, "-dirty" when the checkout had changes, or "nogit"
    started: str  # RFC 3339
    invocation: str  # the report folder's name: one per run
    tools: dict


@dataclass(frozen=True)
class Signer:
    key: signing.SigningKey
    facts: RunFacts
    base_images: dict[str, str]  # platform -> the base image the line builds from


def run_facts(client, build_cli: str, command: list[str], revision: str, started: str, invocation: str) -> RunFacts:
    done = hostprocs.run_host(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], "git")
    commit = done.stdout.strip() if done.returncode == 0 else "nogit"
    version = client.version()
    tools = {
        "docker_engine": version.get("Version"),
        "docker_api": version.get("ApiVersion"),
        "builder": build_cli,
        "components": {c.get("Name"): c.get("Version") for c in version.get("Components", [])},
        "python": host.python_version(),
    }
    return RunFacts(
        command=command,
        commit=commit + ("-dirty" if revision.endswith("-dirty") else ""),
        started=started,
        invocation=invocation,
        tools=tools,
    )


def _file_digest(path: Path) -> dict:
    return {"uri": f"file:{path.relative_to(REPO_ROOT)}", "digest": {"sha256": hashlib.sha256(path.read_bytes()).hexdigest()}}


def dependencies(client, variant: Variant, platform: str, base_image: str, commit: str) -> list[dict]:
    """SLSA resolvedDependencies: the source at its commit, the Dockerfile, the line's locks, the base image."""
    deps = [{"uri": f"git+{SOURCE}@{commit}", "digest": {"gitCommit": commit.removesuffix("-dirty")}}]
    deps.append(_file_digest(dockerfile_path(variant)))
    folder = lock.lock_dir(variant, platform=platform)
    deps += [_file_digest(p) for p in sorted(folder.glob("*.txt"))] if folder.is_dir() else []
    try:
        base = client.images.get(base_image)
        deps.append(
            {
                "uri": f"docker-image://{base_image}",
                "digest": {"sha256": base.id.removeprefix("sha256:")},
                "annotations": {"repoDigests": base.attrs.get("RepoDigests", [])},
            }
        )
    except Exception:  # a base image no longer on the host: said, not invented
        deps.append({"uri": f"docker-image://{base_image}", "annotations": {"note": "not on the host at signing time"}})
    return deps


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def provenance(signer: Signer, line: str, platform: str, deps: list[dict]) -> dict:
    facts = signer.facts
    return statements.provenance_predicate(
        builder_id=f"{SOURCE}/blob/{facts.commit.removesuffix('-dirty')}/build.py",
        revision=facts.commit,
        command=facts.command,
        line=line,
        platform=platform,
        dependencies=deps,
        tools=facts.tools,
        invocation=facts.invocation,
        started=facts.started,
        finished=_now(),
    )


def image_statements(
    signer: Signer,
    subject: Subject,
    validation: dict,
    image_id: str,
    deps: list[dict],
    variant: Variant,
    platform: str,
    sbom_path: Path,
) -> list[dict]:
    """The six statements about one pushed image."""
    locks = [{"name": d["uri"].removeprefix("file:"), "digest": d["digest"]} for d in deps if d["uri"].startswith("file:")]
    configuration = [
        {"name": "image", "uri": f"{subject.name}@{subject.digest}", "digest": {"sha256": image_id.removeprefix("sha256:")}},
        *locks,
    ]
    sbom = json.loads(sbom_path.read_text())
    audit = validation.get("audit", {})
    host_facts = {"machine": host.machine(), "system": host.platform()}
    return [
        statements.statement("provenance", subject, provenance(signer, variant.name, platform, deps)),
        statements.statement("sbom", subject, sbom),
        statements.statement(
            "test-result", subject, statements.test_result_predicate(validation, image_id, configuration, variant.flavor)
        ),
        statements.statement("benchmark", subject, statements.benchmark_predicate(validation, host_facts)),
        statements.statement("vulns", subject, statements.vulns_predicate(audit, signer.facts.commit)),
        statements.statement("vex", subject, statements.vex_predicate(audit, f"{subject.name}@{subject.digest}", SOURCE, _now())),
    ]


def sign_and_attach(signer: Signer, ref: str, digest: str, stmts: list[dict]) -> dict:
    """Sign each statement and attach it to `digest` in the registry; the report's record of it.
    A registry that refuses them fails the push (exit 6): the user asked for a signed image."""
    image = referrers.parse_ref(f"{ref}@{digest}")
    registry = referrers.Registry(image)
    try:
        subject = referrers.subject_descriptor(registry, digest)
        envelopes = [(s["predicateType"], signing.sign(signer.key, s)) for s in stmts]
        added = referrers.attach(registry, subject, envelopes)
    except PipelineError as err:
        raise PushFailed(f"{ref}@{digest[:19]}… was pushed but its signed statements were not attached: {err}") from None
    except Exception as err:  # requests' HTTP errors: the registry refused an upload
        raise PushFailed(
            f"{ref}@{digest[:19]}… was pushed but the registry refused its signed statements: {str(err).splitlines()[0][:200]}"
        ) from None
    kinds = [statements.kind_of(s["predicateType"]) for s in stmts]
    print(f"==> signed {ref}@{digest[:19]}… with key {signer.key.keyid[:16]}…: {', '.join(str(k) for k in kinds)}", flush=True)
    return {
        "signed": True,
        "keyid": signer.key.keyid,
        "subject": digest,
        "statements": {str(k): d["digest"] for k, d in zip(kinds, added, strict=True)},
    }


def attest_image(
    signer: Signer,
    client,
    ref: str,
    digest: str,
    validation: dict,
    image_id: str,
    variant: Variant,
    platform: str,
    base_image: str,
    sbom_path: Path,
) -> dict:
    try:
        deps = dependencies(client, variant, platform, base_image, signer.facts.commit)
        stmts = image_statements(signer, Subject(ref, digest), validation, image_id, deps, variant, platform, sbom_path)
    except (OSError, ValueError) as err:  # the SBOM or a lock file missing or unreadable
        raise PushFailed(
            f"{ref}@{digest[:19]}… was pushed but its statements could not be made ({type(err).__name__}: {str(err)[:160]})"
        ) from None
    return sign_and_attach(signer, ref, digest, stmts)


def attest_index(signer: Signer, ref: str, digest: str, variant: Variant, children: list[dict]) -> dict:
    """An index's provenance and the combined test result of its children ({platform, digest, validation})."""
    subject = Subject(ref, digest)
    predicate = statements.index_test_result(ref, children, variant.flavor)
    deps = [{"uri": f"{ref}@{c['digest']}", "digest": {"sha256": c["digest"].removeprefix("sha256:")}} for c in children]
    stmts = [
        statements.statement(
            "provenance", subject, provenance(signer, variant.name, ",".join(c["platform"] for c in children), deps)
        ),
        statements.statement("test-result", subject, predicate),
    ]
    return sign_and_attach(signer, ref, digest, stmts)
