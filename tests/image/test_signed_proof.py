"""Signed proof against the real registry on 127.0.0.1, with real keys.

The session's pipeline run pushes the default image signed (conftest.pipeline_run): `build.py
verify` passes on it by tag and by digest and shows its figures. Tampering is tried on tiny
images (tests/image/tiny_images.py) signed through the same pipeline.attest code with a
validation record of the pipeline's shape: one byte changed, statements copied to another
digest, the wrong key, an unsigned image, a foreign image under a proven tag, a proof of another
image. A multi-arch index: every child checked.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys

import pytest

from pipeline import attest, index_push, push, referrers, signing
from pipeline.statements import PREDICATES
from pipeline.variants import AMD64, ARM64, REPO_ROOT
from tests.image.conftest import REGISTRY
from tests.image.tiny_images import build_tiny
from tests.records import validation

pytestmark = pytest.mark.image

REF = f"{REGISTRY}/proven-torch-test-signed"  # scripts/ci-cleanup.sh removes proven-torch-test* images
RUN = os.getpid()


def verify_cli(*args: str) -> subprocess.CompletedProcess:
    """`python build.py verify ...` as a user runs it."""
    return subprocess.run(
        [sys.executable, "build.py", "verify", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )


def refused(done: subprocess.CompletedProcess, code: int, *phrases: str) -> str:
    """The one line of a refused verify, checked for its exit code and its words."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code and len(lines) == 1, (done.returncode, done.stdout, done.stderr)
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    return lines[0]


# --------------------------------------------------------------------------- the pipeline's own signed push


def test_verify_passes_by_tag_and_by_digest_and_shows_the_figures(run_result, report, sign_keys, variant):
    tag_ref, digest = next(iter(run_result.pushed.items()))  # the immutable tag, pushed first
    ppo = report["validation"]["ppo"]
    for ref in (tag_ref, f"{tag_ref.rsplit(':', 1)[0]}@{digest}"):
        done = verify_cli(ref, "--key", str(sign_keys["public"]))
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"VERIFIED {ref}") and digest in done.stdout
        assert f"CartPole-v1 to 475.0 in {ppo['steps_to_target']} steps" in done.stdout
        assert "WARNED: on the CPU only, not run: smoke/driver, smoke/gpu" in done.stdout
        assert run_result.stamped_id in done.stdout
    record = json.loads(verify_cli(tag_ref, "--key", str(sign_keys["public"]), "--json").stdout)
    (image,) = record["images"]
    assert record["verified"] is True and image["image_id"] == run_result.stamped_id
    assert image["statements"] == sorted(PREDICATES) and image["benchmark"]["steps_to_target"] == ppo["steps_to_target"]
    assert image["line"] == variant.name and image["command"][:2] == ["python", "build.py"]


def test_a_cpu_only_proof_is_refused_with_require_gpu(run_result, sign_keys):
    tag_ref = next(iter(run_result.pushed))
    refused(verify_cli(tag_ref, "--key", str(sign_keys["public"]), "--require-gpu"), 1, "proven on the CPU only", "--require-gpu")


def test_the_report_names_the_key_and_each_statement(report, sign_keys):
    keyid = signing.load_public_key(sign_keys["public"]).keyid
    (signed,) = report["push"]["signatures"]
    assert signed["keyid"] == keyid and set(signed["statements"]) == set(PREDICATES)
    assert report["push"]["sbom"]["signed"] is True


def test_the_signed_sbom_is_the_reports_sbom(run_result, sign_keys):
    tag_ref, digest = next(iter(run_result.pushed.items()))
    registry = referrers.Registry(referrers.parse_ref(tag_ref))
    public = signing.load_public_key(sign_keys["public"])
    opened = [signing.open_envelope(envelope, public, "sbom") for _, envelope in referrers.envelopes_about(registry, digest)]
    (sbom,) = [s for s in opened if s["predicateType"] == PREDICATES["sbom"]]
    assert sbom["predicate"] == json.loads(run_result.report_path.with_name("sbom.cdx.json").read_text())


def test_the_private_key_is_in_no_log_report_or_layer(run_result, report, run_log, sign_keys):
    secret = "".join(sign_keys["private"].read_text().splitlines()[1:-1])
    assert len(secret) >= 40
    assert secret not in run_log.read_text() and "pushes are signed with key" in run_log.read_text()
    for path in run_result.report_path.parent.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    # The hygiene scan read every file of the image for PEM private keys (a planted signing key is
    # found: tests/unit/test_signing.py); validation passed with no finding.
    assert report["validation"]["hygiene"] == []


# --------------------------------------------------------------------------- tiny images, signed and tampered with


@pytest.fixture(scope="module")
def signer(docker, sign_keys, matrix, variant):
    key = signing.load_signing_key(sign_keys["private"])
    facts = attest.run_facts(docker, "test", ["pytest"], "test", "2026-01-01T00:00:00Z", "test")
    return attest.Signer(key, facts, {AMD64: matrix.base_image_for(AMD64), ARM64: matrix.base_image_for(ARM64)})


@pytest.fixture(scope="module")
def tiny(docker, tmp_path_factory):
    """push(name, platform=AMD64, labels=None) -> (image ID, digest, ref:tag) of a new tiny image."""
    folder = tmp_path_factory.mktemp("tiny")
    pushed = []

    def make(name: str, platform: str = AMD64, labels: dict | None = None, tag: str | None = None):
        image_id = build_tiny(folder, platform, content=f"{name}-{RUN}", labels=labels)
        tag = tag or f"{name}-{RUN}"
        push.tag_image(docker, image_id, REF, [tag])
        digest = push.push_tag(docker, image_id, REF, tag)
        pushed.append(f"{REF}:{tag}")
        return image_id, digest, f"{REF}:{tag}"

    yield make
    subprocess.run(["docker", "rmi", "-f", *pushed], capture_output=True, check=False)


def sign(signer, docker, variant, tmp_path, digest: str, image_id: str, platform: str = AMD64) -> dict:
    sbom = tmp_path / f"sbom-{digest[7:19]}.json"
    sbom.write_text(json.dumps({"bomFormat": "CycloneDX", "specVersion": "1.6", "components": [{"name": "tiny"}]}))
    record = validation()
    return attest.attest_image(
        signer, docker, REF, digest, record, image_id, variant, platform, signer.base_images[platform], sbom
    )


def registry() -> referrers.Registry:
    return referrers.Registry(referrers.parse_ref(REF))


def listed(digest: str) -> list[dict]:
    found = registry().manifest(referrers.fallback_tag(digest))
    return json.loads(found[0])["manifests"] if found else []


def rewrite_index(digest: str, manifests: list[dict]) -> None:
    body = json.dumps({"schemaVersion": 2, "mediaType": referrers.OCI_INDEX, "manifests": manifests}).encode()
    registry().put_manifest(referrers.fallback_tag(digest), body, referrers.OCI_INDEX)


def put_artifact(descriptor: dict, subject: dict, envelope: bytes | None = None) -> dict:
    """A copy of the artifact `descriptor` names, about `subject`, holding `envelope` (default: the same one)."""
    reg = registry()
    manifest = json.loads(reg.manifest(descriptor["digest"])[0])
    if envelope is not None:
        manifest["layers"][0] |= reg.upload(envelope)
    manifest["subject"] = subject
    body = json.dumps(manifest).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    reg.put_manifest(digest, body, referrers.OCI_MANIFEST)
    return {**descriptor, "digest": digest, "size": len(body)}


def test_a_signed_image_verifies_and_signing_it_again_replaces_its_statements(signer, docker, variant, tiny, tmp_path, sign_keys):
    image_id, digest, ref = tiny("twice")
    sign(signer, docker, variant, tmp_path, digest, image_id)
    assert len(listed(digest)) == len(PREDICATES)
    sign(signer, docker, variant, tmp_path, digest, image_id)
    assert len(listed(digest)) == len(PREDICATES), listed(digest)  # replaced, not added beside
    assert verify_cli(ref, "--key", str(sign_keys["public"])).returncode == 0


def test_one_changed_byte_of_a_statement_in_the_registry_is_caught(signer, docker, variant, tiny, tmp_path, sign_keys):
    image_id, digest, ref = tiny("byte")
    sign(signer, docker, variant, tmp_path, digest, image_id)
    manifests = listed(digest)
    i = next(n for n, d in enumerate(manifests) if d["annotations"][referrers.PREDICATE_ANNOTATION] == PREDICATES["test-result"])
    (_, envelope), *_ = [
        (d, e) for d, e in referrers.envelopes_about(registry(), digest) if d["digest"] == manifests[i]["digest"]
    ]
    doc = json.loads(envelope)
    payload = bytearray(base64.b64decode(doc["payload"]))
    payload[payload.index(b"WARNED")] = ord("X")  # one byte
    doc["payload"] = base64.b64encode(bytes(payload)).decode()
    subject = json.loads(registry().manifest(manifests[i]["digest"])[0])["subject"]
    manifests[i] = put_artifact(manifests[i], subject, json.dumps(doc).encode())
    rewrite_index(digest, manifests)
    refused(verify_cli(ref, "--key", str(sign_keys["public"])), 1, "test-result statement", "signature does not verify")


def test_statements_copied_onto_another_images_digest_are_caught(signer, docker, variant, tiny, tmp_path, sign_keys):
    image_id, digest, _ = tiny("original")
    sign(signer, docker, variant, tmp_path, digest, image_id)
    _, other_digest, other_ref = tiny("copy-target")
    subject = referrers.subject_descriptor(registry(), other_digest)
    rewrite_index(other_digest, [put_artifact(d, subject) for d in listed(digest)])
    refused(verify_cli(other_ref, "--key", str(sign_keys["public"])), 1, f"is about {digest}", "copied from another image")


def test_the_wrong_public_key_is_caught(signer, docker, variant, tiny, tmp_path):
    image_id, digest, ref = tiny("wrongkey")
    sign(signer, docker, variant, tmp_path, digest, image_id)
    _, other_public = signing.keygen(tmp_path / "other")
    refused(verify_cli(ref, "--key", str(other_public)), 1, "none of its 6 statements is signed by key", "wrong public key")


def test_an_image_pushed_unsigned_is_caught(tiny, sign_keys):
    _, digest, ref = tiny("unsigned")
    refused(
        verify_cli(ref, "--key", str(sign_keys["public"])), 1, f"no signed statements are attached to {digest}", "pushed unsigned"
    )


def test_a_foreign_image_pushed_under_a_proven_tag_is_caught(signer, docker, variant, tiny, tmp_path, sign_keys):
    image_id, digest, ref = tiny("proven", tag=f"proven-{RUN}")
    sign(signer, docker, variant, tmp_path, digest, image_id)
    assert verify_cli(ref, "--key", str(sign_keys["public"])).returncode == 0
    tiny("foreign", labels={"io.proven-torch.validation": "passed"}, tag=f"proven-{RUN}")  # the same tag, relabelled
    refused(verify_cli(ref, "--key", str(sign_keys["public"])), 1, "io.proven-torch.validation=passed is backed by no signature")


def test_a_proof_of_another_image_is_caught(signer, docker, variant, tiny, tmp_path, sign_keys):
    _, digest, ref = tiny("not-proven")
    proven_id, _, _ = tiny("proven-elsewhere")
    sign(signer, docker, variant, tmp_path, digest, proven_id)  # a statement naming another image's ID
    refused(verify_cli(ref, "--key", str(sign_keys["public"])), 1, f"the proof ran in image {proven_id[:19]}")


def test_every_child_of_a_multi_arch_index_is_verified(signer, docker, variant, tiny, tmp_path, sign_keys):
    children = []
    for platform in (AMD64, ARM64):
        image_id, digest, ref = tiny("line", platform=platform, tag=index_push.arch_tag(f"line-{RUN}", platform))
        sign(signer, docker, variant, tmp_path, digest, image_id, platform)
        children.append(index_push.Child(platform, REF, ref.rsplit(":", 1)[1], digest, image_id))
    index = index_push.push_index(REF, f"line-{RUN}", children)
    about = [{"platform": c.platform, "digest": c.digest, "validation": validation()} for c in children]
    attest.attest_index(signer, REF, index, variant, about)
    done = verify_cli(f"{REF}:line-{RUN}", "--key", str(sign_keys["public"]))
    assert done.returncode == 0, done.stderr
    assert "linux/amd64" in done.stdout and "linux/arm64" in done.stdout and "2 image(s)" in done.stdout
    rewrite_index(children[1].digest, [])  # the arm64 child loses its statements
    refused(verify_cli(f"{REF}:line-{RUN}", "--key", str(sign_keys["public"])), 1, "linux/arm64", "no signed statements")


@pytest.mark.parametrize(
    ("ref", "key", "code", "phrase"),
    [
        ("127.0.0.1:1/nothing:here", "public", 6, "cannot reach the registry 127.0.0.1:1"),
        ("Not A Ref!", "public", 2, "not an image reference"),
        (f"{REF}:no-such-tag", "public", 1, "the registry has no such image"),
        (f"{REF}:any", "missing", 2, "cannot read it"),
    ],
    ids=["unreachable", "malformed", "no-such-tag", "no-key"],
)
def test_verify_exit_codes(sign_keys, tmp_path, ref, key, code, phrase):
    path = sign_keys["public"] if key == "public" else tmp_path / "missing.pub"
    refused(verify_cli(ref, "--key", str(path)), code, phrase)
