"""The publish path: a validated, stamped image into the registry, and with a signing key its signed
statements beside each pushed digest, before any moving tag names it.

    publish(client, tagged, target, options) -> Pushed    one platform's image: its tags (gzip/zstd), SBOM, statements
    publish_index(results, options) -> {ref: digest}     a multi-arch line's plain tags as one index over them
    sign_pushed(...)                                      `build.py sign`: a pushed digest signed after the fact,
                                                          with a later proof in place of the build's (the release)
    withdraw(image_ref)                                   `build.py withdraw`: a digest whose proof failed, removed

What the statements say is made from the files of the build's report folder (report.json,
validation.json, the SBOM, and facts.json, written here at push time), so a push, a later
`build.py sign` and scripts/predicates-from-report.py (cosign's predicates) say the same.
The registry side: pipeline/registry.py (the one client), push.py (docker push), zstd_push.py
(skopeo), index_push.py (docker manifest), referrers.py (statement artifacts). The key is
pipeline/attest.py's alone: this module hands it statements and gets envelopes.
"""

from __future__ import annotations

import json
import platform as host
import secrets
from dataclasses import dataclass
from pathlib import Path

import requests

from pipeline import attest, hostprocs, index_push, lock, push, referrers, registry, statements, zstd_push
from pipeline.build_image import SOURCE
from pipeline.errors import PipelineError, PushFailed, UsageError, ValidationFailed
from pipeline.render import dockerfile_path
from pipeline.statements import Subject
from pipeline.target import Tagged, Target
from pipeline.variants import REPO_ROOT, Variant

FACTS = "facts.json"  # in the report folder: what the provenance says about the run
UNSIGNED = {"signed": False, "reason": "unsigned: no --sign-key (or PROVEN_TORCH_SIGN_KEY) was given"}


def new_run_id(started: str) -> str:
    """A run's id: when it started and a random part (two runs in one second stay two)."""
    return f"{started.replace('-', '').replace(':', '')}-{secrets.token_hex(4)}"


@dataclass(frozen=True)
class RunFacts:
    """What provenance says about the run, gathered once: the command, the source, the tools."""

    command: list[str]
    commit: str  # the full git commit, "-dirty" when the checkout had changes, or "nogit"
    started: str  # RFC 3339
    invocation: str  # the run's id (new_run_id): a signed statement's run annotation names it
    tools: dict


@dataclass(frozen=True)
class PublishOptions:
    facts: RunFacts
    base_images: dict[str, str]  # platform -> the base image the line builds from
    hold_moving_tags: bool = False  # push the immutable tag only; a release moves the others after a GPU proof
    compression: str = "gzip"  # push.COMPRESSIONS
    sign_key: attest.KeySource | None = None  # sign what is pushed (pipeline/attest.py holds the key)


@dataclass(frozen=True)
class Pushed:
    """What the push did; kept apart from the validation record, which is stamped and never changes."""

    refs: dict[str, str]  # ref -> manifest digest
    sbom: dict  # where the SBOM went, or why it did not; signed, it is one of the statements
    compressed_bytes: dict[str, int]  # per compression pushed ("gzip", "zstd"), as the registry's manifest says
    held_tags: tuple[str, ...] = ()  # moving tags not pushed (--hold-moving-tags): a later step moves them
    signed: tuple[dict, ...] = ()  # sign_digest's record per pushed digest; empty: unsigned

    def as_dict(self) -> dict:
        return {
            "refs": self.refs,
            "signatures": list(self.signed) if self.signed else UNSIGNED,
            "sbom": self.sbom,
            "compressed_bytes": self.compressed_bytes,
            "held_tags": list(self.held_tags),
        }


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
    commit += "-dirty" if revision.endswith("-dirty") else ""
    return RunFacts(command=command, commit=commit, started=started, invocation=invocation, tools=tools)


# --------------------------------------------------------------------------- what the statements say


def _file_digest(path: Path) -> dict:
    return {"uri": f"file:{path.relative_to(REPO_ROOT)}", "digest": {"sha256": statements.sha256_file(path)}}


def dependencies(client, variant: Variant, platform: str, base_image: str, commit: str) -> list[dict]:
    """SLSA resolvedDependencies: the source at its commit, the Dockerfile, the line's locks, the base image."""
    deps = [{"uri": f"git+{SOURCE}@{commit}", "digest": {"gitCommit": commit.removesuffix("-dirty")}}]
    deps.append(_file_digest(dockerfile_path(variant)))
    folder = lock.lock_dir(variant, platform=platform)
    deps += [_file_digest(p) for p in sorted(folder.glob("*.txt"))] if folder.is_dir() else []
    base = client.images.list(name=base_image) if base_image else []  # the base image a build used; absent: said, not invented
    if base:
        deps.append(
            {
                "uri": f"docker-image://{base_image}",
                "digest": {"sha256": base[0].id.removeprefix("sha256:")},
                "annotations": {"repoDigests": base[0].attrs.get("RepoDigests", [])},
            }
        )
    else:
        deps.append({"uri": f"docker-image://{base_image}", "annotations": {"note": "not on the host at signing time"}})
    return deps


def write_facts(client, target: Target, tagged: Tagged, options: PublishOptions, tags: list[str]) -> None:
    """facts.json beside the report: the run's facts, the resolved dependencies, the tags the image is
    pushed under (held ones included), read by every later statement about it."""
    facts = options.facts
    deps = dependencies(client, target.variant, target.platform, options.base_images.get(target.platform, ""), facts.commit)
    record = {
        "command": facts.command,
        "commit": facts.commit,
        "started": facts.started,
        "finished": statements.now(),  # built, validated and stamped: what a later signing says too
        "invocation": facts.invocation,
        "tools": facts.tools,
        "dependencies": deps,
        "line": target.variant.name,
        "flavor": target.variant.flavor,
        "platform": target.platform,
        "ref": target.ref,
        "tags": tags,
        "stamped_image_id": tagged.stamped_id,
    }
    (target.run_dir / FACTS).write_text(json.dumps(record, indent=2) + "\n")


def _read(path: Path, what: str) -> dict:
    try:
        value = json.loads(path.read_text())
    except OSError as err:
        raise UsageError(f"{path}: cannot read the {what} ({err.strerror})") from None
    except ValueError:
        raise UsageError(f"{path}: the {what} is not JSON") from None
    if not isinstance(value, dict):
        raise UsageError(f"{path}: the {what} is not a JSON object")
    return value


def _provenance(facts: dict, platform: str, tags: list[str], deps: list[dict]) -> dict:
    commit = str(facts["commit"])
    return statements.provenance_predicate(
        builder_id=f"{SOURCE}/blob/{commit.removesuffix('-dirty')}/build.py",
        revision=commit,
        command=list(facts["command"]),
        line=str(facts["line"]),
        platform=platform,
        tags=tags,
        dependencies=deps,
        tools=facts["tools"],
        invocation=str(facts["invocation"]),
        started=str(facts["started"]),
        finished=str(facts["finished"]),
    )


def image_statements(run_dir: Path, subject: Subject, proof: dict | None = None) -> list[dict]:
    """The six statements about one pushed image, from its report folder; `proof`: a later proof of the
    same image (proof.json) in place of the build's own test result and benchmark."""
    facts = _read(run_dir / FACTS, "run facts (written at push)")
    validation = _read(run_dir / "validation.json", "validation record")
    if proof is not None:
        validation = statements.validation_with_proof(validation, proof)
    sbom = _read(run_dir / validation.get("sbom", {}).get("file", "sbom.cdx.json"), "SBOM")
    deps = facts["dependencies"]
    image_id = str(facts["stamped_image_id"])
    locks = [{"name": d["uri"].removeprefix("file:"), "digest": d["digest"]} for d in deps if d["uri"].startswith("file:")]
    configuration = [
        {"name": "image", "uri": f"{subject.name}@{subject.digest}", "digest": {"sha256": image_id.removeprefix("sha256:")}},
        *locks,
    ]
    audit = validation.get("audit", {})
    host_facts = {"machine": host.machine(), "system": host.platform()}
    flavor = facts.get("flavor")
    return [
        statements.statement("provenance", subject, _provenance(facts, str(facts["platform"]), list(facts["tags"]), deps)),
        statements.statement("sbom", subject, sbom),
        statements.statement(
            "test-result", subject, statements.test_result_predicate(validation, image_id, configuration, flavor)
        ),
        statements.statement("benchmark", subject, statements.benchmark_predicate(validation, host_facts)),
        statements.statement("vulns", subject, statements.vulns_predicate(audit, str(facts["commit"]))),
        statements.statement(
            "vex", subject, statements.vex_predicate(audit, f"{subject.name}@{subject.digest}", SOURCE, statements.now())
        ),
    ]


def index_statements(subject: Subject, facts: dict, tags: list[str], children: list[dict]) -> list[dict]:
    """An index's provenance and the combined test result of its children ({platform, digest, validation})."""
    deps = [{"uri": f"{subject.name}@{c['digest']}", "digest": {"sha256": c["digest"].removeprefix("sha256:")}} for c in children]
    platforms = ",".join(c["platform"] for c in children)
    predicate = statements.index_test_result(subject.name, children, facts.get("flavor"))
    return [
        statements.statement("provenance", subject, _provenance(facts, platforms, tags, deps)),
        statements.statement("test-result", subject, predicate),
    ]


def sign_digest(key: attest.KeySource, ref: str, digest: str, stmts: list[dict]) -> dict:
    """Sign each statement and attach it to `digest` in the registry (replacing what an earlier run
    signed); the report's record of it. A registry that refuses them fails the push (exit 6)."""
    keyid, envelopes = attest.sign(key, stmts)
    client = registry.Registry(registry.parse_ref(f"{ref}@{digest}"))
    try:
        subject = referrers.subject_descriptor(client, digest)
        added = referrers.attach(client, subject, [(s["predicateType"], e) for s, e in zip(stmts, envelopes, strict=True)])
    except (PipelineError, requests.RequestException) as err:
        raise PushFailed(
            f"{ref}@{digest[:19]}… is pushed but the registry did not take its signed statements: {str(err).splitlines()[0][:200]}"
        ) from None
    kinds = [str(statements.kind_of(s["predicateType"])) for s in stmts]
    print(f"==> signed {ref}@{digest[:19]}… with key {keyid[:16]}…: {', '.join(kinds)}", flush=True)
    run = stmts[0]["subject"][0]["annotations"][statements.RUN_ANNOTATION]
    return {
        "signed": True,
        "keyid": keyid,
        "subject": digest,
        "run": run,
        "statements": dict(zip(kinds, (d["digest"] for d in added), strict=True)),
    }


# --------------------------------------------------------------------------- one platform's image


def publish(client, tagged: Tagged, target: Target, options: PublishOptions) -> Pushed:
    """Push every tag in the chosen compression (push.push_plan: immutable tags first), or with
    hold_moving_tags the immutable ones only. With a key, each pushed digest gets its signed
    statements once its immutable tag is pushed, before any moving tag moves."""
    common = dict(tags=tagged.tags, stamped_id=tagged.stamped_id)
    plan = push.push_plan(options.compression, tagged.tags)
    to_push = [step for step in plan if step[0] == tagged.tags[0] or not options.hold_moving_tags]
    held = tuple(remote for _, remote, _ in plan[len(to_push) :])
    write_facts(client, target, tagged, options, [remote for _, remote, _ in plan])
    refs: dict[str, str] = {}
    signed: list[dict] = []
    zstd_digest = None

    def sign_what_is_pushed(key: attest.KeySource) -> None:
        for digest in dict.fromkeys(refs.values()):
            subject = Subject(target.ref, digest, run=options.facts.invocation)
            signed.append(sign_digest(key, target.ref, digest, image_statements(target.run_dir, subject)))

    try:
        for local, remote, form in to_push:
            if options.sign_key and local != tagged.tags[0] and not signed:  # the first moving tag: sign first
                sign_what_is_pushed(options.sign_key)
            if form == "zstd":
                zstd_digest = zstd_push.push_tag_zstd(client, tagged.stamped_id, target.ref, local, remote, zstd_digest)
                refs[f"{target.ref}:{remote}"] = zstd_digest
            else:
                refs[f"{target.ref}:{remote}"] = push.push_tag(client, tagged.stamped_id, target.ref, local)
        if options.sign_key and not signed:
            sign_what_is_pushed(options.sign_key)
    except PipelineError as err:
        failed = Pushed(
            refs=refs, sbom={"pushed": False, "reason": "the image push failed"}, compressed_bytes={}, signed=tuple(signed)
        )
        target.write_report(tagged.validated_id, tagged.validation, status="validated", push=failed, error=str(err), **common)
        raise
    first_tag = to_push[0][1]
    if signed:
        sbom_where = {"pushed": True, "signed": True, "statements": [s["statements"]["sbom"] for s in signed]}
    else:
        sbom_file = target.run_dir / tagged.validation.sbom["file"]
        sbom_where = registry.push_sbom(target.ref, refs[f"{target.ref}:{first_tag}"], sbom_file)
    compressed = {}
    for _, remote, form in to_push:
        if form not in compressed and (size := registry.compressed_bytes(target.ref, remote)) is not None:
            compressed[form] = size
            print(f"==> compressed size in the registry ({form}): {size / 1e9:.2f} GB", flush=True)
    pushed = Pushed(refs=refs, sbom=sbom_where, compressed_bytes=compressed, held_tags=held, signed=tuple(signed))
    if held:
        print(f"==> held back (not pushed): {', '.join(held)}; move them once the pushed digest is proven", flush=True)
    target.write_report(tagged.validated_id, tagged.validation, status="pushed", push=pushed, **common)
    return pushed


# --------------------------------------------------------------------------- a multi-arch line's index


def publish_index(
    results: dict[str, tuple[Target, Tagged, Pushed]], platforms: tuple[str, ...], options: PublishOptions
) -> dict[str, str]:
    """The plain tags as one multi-arch index over the per-architecture images just pushed (immutable tag
    first; with a key, the index is signed before any moving tag names it)."""
    first_target, first, _ = results[platforms[0]]
    ref = first_target.ref
    if any(tagged.line_tags != first.line_tags for _, tagged, _ in results.values()):
        raise PipelineError("the architectures' images report different torch, CUDA or Python; no multi-arch tag moved")
    children = {
        platform: index_push.Child(platform, ref, tagged.tags[0], pushed.refs[f"{ref}:{tagged.tags[0]}"], tagged.stamped_id)
        for platform, (_, tagged, pushed) in results.items()
    }
    ordered = index_push.plan_index(platforms, children)
    line_tags = first.line_tags[:1] if options.hold_moving_tags else first.line_tags
    index = {f"{ref}:{line_tags[0]}": index_push.push_index(ref, line_tags[0], ordered)}
    signed: dict = {}
    if options.sign_key:  # before any moving tag names the index
        about = [
            {"platform": c.platform, "digest": c.digest, "validation": results[c.platform][1].validation.as_dict()}
            for c in ordered
        ]
        facts = {**_read(first_target.run_dir / FACTS, "run facts"), "line": first_target.variant.name}
        digest = index[f"{ref}:{line_tags[0]}"]
        stmts = index_statements(Subject(ref, digest, run=options.facts.invocation), facts, first.line_tags, about)
        signed = sign_digest(options.sign_key, ref, digest, stmts)
    index |= {f"{ref}:{tag}": index_push.push_index(ref, tag, ordered) for tag in line_tags[1:]}
    record = {
        "index": index,
        "signatures": signed or UNSIGNED,
        "held_tags": first.line_tags[1:] if options.hold_moving_tags else [],
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
    (first_target.run_dir.parent / "index.json").write_text(json.dumps(record, indent=2) + "\n")
    return index


# --------------------------------------------------------------------------- after the push: sign, or withdraw


def sign_pushed(
    image_ref: str,
    report: Path,
    key: attest.KeySource,
    proof: Path | None = None,
    require_gpu: bool = False,
    run: str | None = None,
) -> list[str]:
    """`build.py sign IMAGE@DIGEST --report REPORT [--proof PROOF]`: sign a digest a build pushed (unsigned,
    or signed before), from that build's report folder; with --proof, a later proof of it (proof.json of
    `proof --out`) is what the test result and benchmark say. Only a proof that passed is signed, and with
    --require-gpu only one that ran on a GPU. Signing replaces what an earlier run signed."""
    ref = registry.parse_ref(image_ref)
    if not ref.is_digest:
        raise UsageError(f"{image_ref}: sign a digest (HOST/REPO@sha256:...), the one the build pushed, not a tag")
    pushed = _read(report, "build report")
    if ref.reference not in (pushed.get("pushed") or {}).values() or pushed.get("status") != "pushed":
        raise UsageError(
            f"{report}: that build did not push {ref.reference} (its report names {', '.join((pushed.get('pushed') or {}).values()) or 'none'})"
        )
    proven = _read(proof, "proof record") if proof else None
    if proven is not None:
        if proven.get("ok") is not True:
            raise ValidationFailed(
                f"{proof}: the proof did not pass ({proven.get('verdict') or 'no verdict'}): nothing signed; withdraw the digest "
                f"(`build.py withdraw {image_ref}`)"
            )
        if require_gpu and not proven.get("gpu"):
            raise ValidationFailed(f"{proof}: the proof ran on the CPU only and --require-gpu was given: nothing signed")
    elif require_gpu and not (pushed.get("validation") or {}).get("gpu"):
        raise ValidationFailed(
            f"{report}: the build validated on the CPU only and --require-gpu was given: pass the GPU proof with --proof"
        )
    attest.check_key(key)
    subject = Subject(ref.name, ref.reference, run=run or new_run_id(statements.now()))
    record = sign_digest(key, ref.name, ref.reference, image_statements(report.parent, subject, proven))
    return [f"==> {ref}: six statements signed (run {record['run']}), replacing any an earlier run signed"]


def withdraw(image_ref: str) -> list[str]:
    """`build.py withdraw IMAGE@DIGEST`: delete the manifest (every tag naming it goes with it: registries
    delete by digest) and the statements listed for it."""
    ref = registry.parse_ref(image_ref)
    if not ref.is_digest:
        raise UsageError(f"{image_ref}: withdraw a digest (HOST/REPO@sha256:...); a tag may already name another image")
    client = registry.Registry(ref)
    listed = client.referrers(ref.reference)
    with client.delete_manifest(ref.reference) as gone:
        status = gone.status_code
    if status not in (200, 202, 404):
        raise PushFailed(
            f"the registry {ref.host} answered {status} to deleting {ref.reference}: it does not let clients delete "
            "manifests (GHCR: delete the package version with the GitHub API, as .github/workflows/release.yml does)"
        )
    removed = referrers.delete_about(client, ref.reference, listed)  # best effort: the image itself is what mattered
    tagged = client.manifest(registry.fallback_tag(ref.reference))
    if tagged is not None:
        client.delete_manifest(tagged[2]).close()
    said = "was already gone" if status == 404 else "is deleted, with every tag that named it"
    return [f"==> {ref}: {said}; {removed} of the {len(listed)} artifact(s) listed for it deleted"]
