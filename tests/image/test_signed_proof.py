"""Signed proof against the real registry on 127.0.0.1, with real keys.

The session's pipeline run pushes the default image signed with an encrypted key
(conftest.pipeline_run): `build.py verify` passes on it by tag and by digest and shows its
figures. Tampering is tried on tiny images (tests/image/tiny_images.py) signed through the same
code (signing.image_statements from a report folder, signing.sign_digest): one byte changed,
statements copied to another digest, the wrong key, an unsigned image, a foreign image under a
proven tag, a proof of another image, a proven image moved under another line's tag, a proof past
--max-age, ten re-signs, the release's failed-GPU-proof path (nothing signed, the digest
withdrawn) and its passed one. A multi-arch index: every child checked. The attacks that need a
registry with the referrers API (reordered annotations, mixed or incomplete runs, hostile pages)
are in tests/unit/test_verify_registry.py, against a crafted server.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread

import pytest

from pipeline import attest, push, referrers, registry, statements, verify
from pipeline.docker_env import find_build_cli
from pipeline.records import Facts
from pipeline.signing import SignRequest, image_statements, index_statements, sign_command, sign_digest
from pipeline.statements import PREDICATES, Subject
from pipeline.variants import AMD64, ARM64, REPO_ROOT, arch
from tests.image.conftest import REGISTRY, opened
from tests.image.tiny_images import build_tiny
from tests.records import proof_folder, proof_record, run_folder, signable, stamp_label, validation, validation_files
from tests.signer_clock import signer_clock

pytestmark = pytest.mark.image

REF = f"{REGISTRY}/proven-torch-test-signed"  # scripts/ci-cleanup.sh removes proven-torch-test* images
RUN = os.getpid()


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python build.py ...` as a user runs it."""
    return subprocess.run(
        [sys.executable, "build.py", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=env
    )


def verify_cli(*args: str) -> subprocess.CompletedProcess:
    return cli("verify", *args)


def refused(done: subprocess.CompletedProcess, code: int, *phrases: str) -> str:
    """The one line of a refused command, checked for its exit code and its words."""
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
        assert f"CartPole-v1 to 475.0 in {ppo['steps_to_target']:,} steps" in done.stdout
        assert "WARNED: on the CPU only, not run: smoke/driver, smoke/gpu" in done.stdout
        assert run_result.stamped_id in done.stdout
    record = json.loads(verify_cli(tag_ref, "--key", str(sign_keys["public"]), "--json").stdout)
    (image,) = record["images"]
    assert record["verified"] is True and image["test_result"]["image_id"] == run_result.stamped_id
    assert image["statements"] == sorted(PREDICATES) and image["benchmark"]["steps_to_target"] == ppo["steps_to_target"]
    assert image["provenance"]["line"] == variant.name and image["provenance"]["command"][:2] == ["python", "build.py"]
    assert set(report["tags"]) <= set(image["provenance"]["tags"])  # every tag pushed is named in the signed provenance


def test_diff_of_the_default_image_reads_its_versions_from_the_signed_sbom(run_result, sign_keys, variant):
    tag_ref, digest = next(iter(run_result.pushed.items()))
    done = cli("diff", tag_ref, f"{tag_ref.rsplit(':', 1)[0]}@{digest}", "--key", str(sign_keys["public"]), "--json")
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    versions = record["versions"]["b"]
    assert record["same_image"] and record["regressions"] == [] and versions["line"] == variant.name
    assert versions["torch"].startswith(variant.torch) and versions["Python"].startswith(variant.python)
    assert record["cost"]["pull_for_b_bytes"] == 0 and record["cost"]["a_compressed_bytes"] > 1e9


def test_a_cpu_only_proof_is_refused_with_require_gpu(run_result, sign_keys):
    tag_ref = next(iter(run_result.pushed))
    refused(verify_cli(tag_ref, "--key", str(sign_keys["public"]), "--require-gpu"), 1, "proven on the CPU only", "--require-gpu")


def test_the_report_names_the_key_the_run_and_each_statement(report, sign_keys):
    keyid = attest.load_public_key(sign_keys["public"]).keyid
    (signed,) = report["push"]["signatures"]
    assert signed["keyid"] == keyid and set(signed["statements"]) == set(PREDICATES) and signed["run"]
    assert report["push"]["sbom"]["signed"] is True


def test_every_statement_carries_its_run_and_signing_time_inside_the_signature(run_result, report, sign_keys):
    tag_ref, digest = next(iter(run_result.pushed.items()))
    found = opened(digest, tag_ref.rsplit(":", 1)[0], sign_keys["public"])
    notes = {json.dumps(s["subject"][0]["annotations"], sort_keys=True) for s in found}
    assert len(found) == len(PREDICATES) and len(notes) == 1  # one run, one signing time, for all six
    (note,) = [json.loads(n) for n in notes]
    assert note[statements.RUN_ANNOTATION] == report["push"]["signatures"][0]["run"]


def test_the_signed_sbom_is_the_reports_sbom(run_result, sign_keys):
    tag_ref, digest = next(iter(run_result.pushed.items()))
    (sbom,) = [
        s for s in opened(digest, tag_ref.rsplit(":", 1)[0], sign_keys["public"]) if s["predicateType"] == PREDICATES["sbom"]
    ]
    assert sbom["predicate"] == json.loads(run_result.report_path.with_name("sbom.cdx.json").read_text())


def test_the_private_key_and_its_passphrase_are_in_no_log_report_or_layer(run_result, report, run_log, sign_keys):
    secret = "".join(sign_keys["private"].read_text().splitlines()[1:-1])
    passphrase = sign_keys["passphrase"].read_text().strip()
    assert len(secret) >= 40 and "ENCRYPTED" in sign_keys["private"].read_text()
    log = run_log.read_text()
    assert secret not in log and passphrase not in log and "pushes are signed with key" in log
    for path in run_result.report_path.parent.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes() and passphrase.encode() not in path.read_bytes(), path
    # The hygiene scan read every file of the image for PEM private keys (a planted signing key is
    # found: tests/unit/test_attest.py); validation passed with no finding.
    assert report["validation"]["hygiene"] == []


# --------------------------------------------------------------------------- tiny images, signed and tampered with


@pytest.fixture(scope="module")
def tiny(docker, tmp_path_factory):
    """make(name, platform=AMD64, labels=None, tag=None) -> (image ID, digest, ref:tag) of a new tiny image, pushed."""
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


def key_of(sign_keys) -> attest.KeySource:
    return attest.KeySource(sign_keys["private"], sign_keys["passphrase"])


def sign(sign_keys, tmp_path, ref: str, digest: str, image_id: str, platform: str = AMD64, **folder) -> dict:
    """Sign a tiny image as a push does: statements from its report folder, signed, attached; `clock`: the
    signer's clock that far off (tests/signer_clock.py)."""
    run_dir = tmp_path / f"run-{digest[7:19]}-{len(list(tmp_path.iterdir()))}"
    tags = folder.pop("tags", (ref.rsplit(":", 1)[1],))
    clock = folder.pop("clock", "+0")
    run_folder(run_dir, ref=REF, digest=digest, image_id=image_id, platform=platform, tags=tags, **folder)
    with signer_clock(clock):
        return sign_digest(key_of(sign_keys), client(), digest, image_statements(signable(run_dir), Subject(REF, digest)))


def client() -> registry.Registry:
    return registry.Registry(registry.parse_ref(REF))


def listed(digest: str) -> list[dict]:
    found = client().manifest(registry.fallback_tag(digest))
    return json.loads(found[0])["manifests"] if found else []


def rewrite_index(digest: str, manifests: list[dict]) -> None:
    body = json.dumps({"schemaVersion": 2, "mediaType": registry.OCI_INDEX, "manifests": manifests}).encode()
    client().put_manifest(registry.fallback_tag(digest), body, registry.OCI_INDEX)


def put_artifact(descriptor: dict, subject: dict, envelope: bytes | None = None) -> dict:
    """A copy of the artifact `descriptor` names, about `subject`, holding `envelope` (default: the same one)."""
    reg = client()
    manifest = json.loads(reg.manifest(descriptor["digest"])[0])
    if envelope is not None:
        manifest["layers"][0] |= reg.upload(envelope)
    manifest["subject"] = subject
    body = json.dumps(manifest).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    reg.put_manifest(digest, body, registry.OCI_MANIFEST)
    return {**descriptor, "digest": digest, "size": len(body)}


def test_ten_re_signs_of_one_digest_leave_one_set_and_it_verifies(sign_keys, tiny, tmp_path):
    image_id, digest, ref = tiny("resigned")
    records = [sign(sign_keys, tmp_path, ref, digest, image_id) for _ in range(10)]
    runs = [r["run"] for r in records]
    assert len(set(runs)) == 10
    superseded = [d for r in records[:-1] for d in r["statements"].values()]
    assert [d for d in superseded if client().manifest(d) is not None] == []  # deleted by digest, not only unlisted
    kinds = [d["annotations"][referrers.PREDICATE_ANNOTATION] for d in listed(digest)]
    assert sorted(kinds) == sorted(PREDICATES.values()), kinds  # one statement per kind: replaced, not added beside
    done = verify_cli(ref, "--key", str(sign_keys["public"]), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["images"][0]["run"] == runs[-1]


def test_one_changed_byte_of_a_statement_in_the_registry_is_caught(sign_keys, tiny, tmp_path):
    image_id, digest, ref = tiny("byte")
    sign(sign_keys, tmp_path, ref, digest, image_id)
    manifests = listed(digest)
    i = next(n for n, d in enumerate(manifests) if d["annotations"][referrers.PREDICATE_ANNOTATION] == PREDICATES["test-result"])
    artifact = json.loads(client().manifest(manifests[i]["digest"])[0])
    doc = json.loads(client().blob(artifact["layers"][0]["digest"]))
    payload = bytearray(base64.b64decode(doc["payload"]))
    payload[payload.index(b"WARNED")] = ord("X")  # one byte
    doc["payload"] = base64.b64encode(bytes(payload)).decode()
    manifests[i] = put_artifact(manifests[i], artifact["subject"], json.dumps(doc).encode())
    rewrite_index(digest, manifests)
    refused(verify_cli(ref, "--key", str(sign_keys["public"])), 1, "a statement", "signature does not verify")


def test_statements_copied_onto_another_images_digest_are_caught(sign_keys, tiny, tmp_path):
    image_id, digest, _ = tiny("original")
    sign(sign_keys, tmp_path, f"{REF}:original-{RUN}", digest, image_id)
    _, other_digest, other_ref = tiny("copy-target")
    subject = referrers.subject_descriptor(client(), other_digest)
    rewrite_index(other_digest, [put_artifact(d, subject) for d in listed(digest)])
    refused(verify_cli(other_ref, "--key", str(sign_keys["public"])), 1, f"is about {digest}", "copied from another image")


def test_the_wrong_public_key_is_caught(sign_keys, tiny, tmp_path):
    image_id, digest, ref = tiny("wrongkey")
    sign(sign_keys, tmp_path, ref, digest, image_id)
    _, other_public, _ = attest.keygen(tmp_path / "other")
    refused(verify_cli(ref, "--key", str(other_public)), 1, "none of its 6 statements is signed by key", "wrong public key")


def test_during_a_key_rotation_either_key_verifies_and_neither_alone_is_another(sign_keys, tiny, tmp_path):
    image_id, digest, ref = tiny("rotation")
    sign(sign_keys, tmp_path, ref, digest, image_id)  # signed with the old key
    _, new_public, _ = attest.keygen(tmp_path / "new")
    refused(verify_cli(ref, "--key", str(new_public)), 1, "none of its 6 statements is signed by key")
    done = verify_cli(ref, "--key", str(new_public), "--key", str(sign_keys["public"]))
    assert done.returncode == 0, done.stderr
    assert f"{attest.load_public_key(sign_keys['public']).keyid[:16]}…" in done.stdout


def test_an_image_pushed_unsigned_is_caught(tiny, sign_keys):
    _, digest, ref = tiny("unsigned")
    refused(
        verify_cli(ref, "--key", str(sign_keys["public"])), 1, f"no signed statements are attached to {digest}", "pushed unsigned"
    )


def test_a_foreign_image_pushed_under_a_proven_tag_is_caught(sign_keys, tiny, tmp_path):
    image_id, digest, ref = tiny("proven", tag=f"proven-{RUN}")
    sign(sign_keys, tmp_path, ref, digest, image_id)
    assert verify_cli(ref, "--key", str(sign_keys["public"])).returncode == 0
    tiny("foreign", labels={"io.proven-torch.validation": "passed"}, tag=f"proven-{RUN}")  # the same tag, relabelled
    refused(verify_cli(ref, "--key", str(sign_keys["public"])), 1, "io.proven-torch.validation=passed is backed by no signature")


def test_a_proof_of_another_image_is_caught(sign_keys, tiny, tmp_path):
    _, digest, ref = tiny("not-proven")
    proven_id, _, _ = tiny("proven-elsewhere")
    sign(sign_keys, tmp_path, ref, digest, proven_id)  # a statement naming another image's ID
    refused(verify_cli(ref, "--key", str(sign_keys["public"])), 1, f"the proof ran in image {proven_id[:19]}")


def test_a_proven_image_of_one_line_under_another_lines_tag_is_caught(docker, sign_keys, tiny, tmp_path):
    """The signed 2.4-cu121 image moved under a 2.9-cu128 tag: its provenance names the tags it was pushed under."""
    image_id, digest, ref = tiny("old-line", tag=f"2.4-cu121-{RUN}")
    sign(sign_keys, tmp_path, ref, digest, image_id, line="2.4-cu121")
    assert verify_cli(ref, "--key", str(sign_keys["public"])).returncode == 0
    push.tag_image(docker, image_id, REF, [f"2.9-cu128-{RUN}"])
    assert push.push_tag(docker, image_id, REF, f"2.9-cu128-{RUN}") == digest  # the same proven digest, another tag
    refused(
        verify_cli(f"{REF}:2.9-cu128-{RUN}", "--key", str(sign_keys["public"])),
        1,
        f"the tag 2.9-cu128-{RUN} is not one this image was pushed under",
        "line 2.4-cu121",
    )
    by_digest = f"{REF}@{digest}"
    assert verify_cli(by_digest, "--key", str(sign_keys["public"]), "--expect-line", "2.4-cu121").returncode == 0
    refused(verify_cli(by_digest, "--key", str(sign_keys["public"]), "--expect-line", "2.9-cu128"), 1, "not the 2.9-cu128")


def test_a_moving_tag_moved_back_to_an_older_signed_digest_is_refused(docker, sign_keys, tiny, tmp_path):
    """Two signed builds of one line; the moving tag moved back to the older: verify of the moving tag names the
    newer build; the older by its own immutable tag or digest, and the moving tag on the newest, still verify."""
    stem, moving = f"rb{RUN}-0.1.0-cu100-py3.0", f"2.9-cu128-rb{RUN}"
    builds = {}
    for date, rev, clock in (("20261201", "aaaaaaa", "-4d"), ("20261205", "bbbbbbb", "+0")):
        immutable = f"{stem}-{date}-{rev}"
        image_id, digest, _ = tiny(f"rollback-{date}", tag=immutable)
        sign(sign_keys, tmp_path, f"{REF}:{immutable}", digest, image_id, tags=(immutable, moving), clock=clock)
        builds[date] = (image_id, digest, immutable)
    public = str(sign_keys["public"])
    for date in ("20261201", "20261205"):  # the moving tag follows the builds; the newest is where it ends
        push.tag_image(docker, builds[date][0], REF, [moving])
        push.push_tag(docker, builds[date][0], REF, moving)
    assert verify_cli(f"{REF}:{moving}", "--key", public).returncode == 0
    push.tag_image(docker, builds["20261201"][0], REF, [moving])  # moved back
    assert push.push_tag(docker, builds["20261201"][0], REF, moving) == builds["20261201"][1]
    refused(
        verify_cli(f"{REF}:{moving}", "--key", public), 1, f"{builds['20261205'][2]} names a newer signed build", "moved back"
    )
    assert verify_cli(f"{REF}:{builds['20261201'][2]}", "--key", public).returncode == 0
    assert verify_cli(f"{REF}@{builds['20261201'][1]}", "--key", public).returncode == 0


def test_a_multi_arch_tag_moved_back_to_an_older_signed_index_is_refused(sign_keys, tiny, tmp_path):
    """The rollback check for a multi-arch line, whose moving tag names an index: moved back to an older signed
    index, verify names the newer one (it skipped indexes: the multi-arch lines' moving tags had no such check)."""
    stem, moving = f"rbx{RUN}-0.1.0-cu100-py3.0", f"multi-arch-rb{RUN}"
    builds = {}
    for date, rev, clock in (("20261201", "aaaaaaa", "-4d"), ("20261205", "bbbbbbb", "+0")):
        immutable, folder = f"{stem}-{date}-{rev}", tmp_path / date
        folder.mkdir()
        children = []
        for platform in (AMD64, ARM64):
            tag = push.arch_tag(immutable, platform)
            image_id, digest, ref = tiny(f"rbx-{date}", platform=platform, tag=tag)
            sign(sign_keys, folder, ref, digest, image_id, platform, tags=(tag,), clock=clock)
            children.append(push.Child(platform, REF, tag, digest, image_id))
        index = push.push_index(REF, immutable, children)
        about = [{"platform": c.platform, "digest": c.digest, "validation": validation()} for c in children]
        facts = Facts.load(next(folder.glob("run-*")).joinpath("facts.json"))
        with signer_clock(clock):
            sign_digest(
                key_of(sign_keys), client(), index, index_statements(Subject(REF, index), facts, [immutable, moving], about)
            )
        builds[date] = (index, immutable, children)
    public = str(sign_keys["public"])
    for date in ("20261201", "20261205"):  # the moving tag follows the builds; the newest is where it ends
        push.push_index(REF, moving, builds[date][2])
    assert verify_cli(f"{REF}:{moving}", "--key", public).returncode == 0
    assert push.push_index(REF, moving, builds["20261201"][2]) == builds["20261201"][0]  # moved back
    refused(
        verify_cli(f"{REF}:{moving}", "--key", public), 1, f"{builds['20261205'][1]} names a newer signed build", "moved back"
    )
    assert verify_cli(f"{REF}:{builds['20261201'][1]}", "--key", public).returncode == 0


def test_the_real_registrys_tag_list_hides_no_newer_build_of_the_line(monkeypatch):
    """docker-registry's tag list, asked for 10 tags a page from the line's own tag on: thirty tags that sort
    before the line hide none of its newer builds. Debian's registry ignores `n` and `last` and sends every tag,
    unordered, with no Link: kept whole (the CI registry crossed 1,000 tags, and the first 1,000 hid them)."""
    monkeypatch.setattr(registry, "MAX_TAGS", 10)
    reg = registry.Registry(registry.parse_ref(f"{REF}-pages{RUN}:x"))
    config = reg.upload(b"{}")
    body = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": registry.OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
            "layers": [],
        }
    ).encode()
    stem = "0.1.0-cu100-py3.0"
    line = [f"{stem}-202612{day:02d}-aaaaaaa" for day in range(1, 26)]
    for tag in [f"0.1-filler-{i:02d}" for i in range(30)] + line:
        reg.put_manifest(tag, body, registry.OCI_MANIFEST)
    assert set(line) <= set(verify.line_tags(reg, line[0]))
    assert verify.newer_builds(line[0], verify.line_tags(reg, line[0])) == line[:-6:-1]  # the newest five


def test_a_proof_older_than_max_age_is_refused(sign_keys, tiny, tmp_path):
    image_id, digest, ref = tiny("old-proof")
    sign(sign_keys, tmp_path, ref, digest, image_id, clock="-100d")
    refused(verify_cli(ref, "--key", str(sign_keys["public"])), 1, "proven 100 days ago", "past --max-age 90")
    assert verify_cli(ref, "--key", str(sign_keys["public"]), "--max-age", "365").returncode == 0


def test_every_child_of_a_multi_arch_index_is_verified(sign_keys, tiny, tmp_path):
    children = []
    for platform in (AMD64, ARM64):
        image_id, digest, ref = tiny("line", platform=platform, tag=push.arch_tag(f"line-{RUN}", platform))
        sign(sign_keys, tmp_path, ref, digest, image_id, platform)
        children.append(push.Child(platform, REF, ref.rsplit(":", 1)[1], digest, image_id))
    index = push.push_index(REF, f"line-{RUN}", children)
    about = [{"platform": c.platform, "digest": c.digest, "validation": validation()} for c in children]
    facts = Facts.load(next(tmp_path.glob("run-*")).joinpath("facts.json"))
    stmts = index_statements(Subject(REF, index), facts, [f"line-{RUN}"], about)
    sign_digest(key_of(sign_keys), client(), index, stmts)
    done = verify_cli(f"{REF}:line-{RUN}", "--key", str(sign_keys["public"]))
    assert done.returncode == 0, done.stderr
    assert "linux/amd64" in done.stdout and "linux/arm64" in done.stdout and "2 image(s)" in done.stdout
    rewrite_index(children[1].digest, [])  # the arm64 child loses its statements
    refused(verify_cli(f"{REF}:line-{RUN}", "--key", str(sign_keys["public"])), 1, "linux/arm64", "no signed statements")


# --------------------------------------------------------------------------- the release's path, simulated


def release_build(tiny, tmp_path, name: str):
    """What the release's build job leaves: the digest pushed under its immutable tag only, unsigned, its report,
    and the image ID a later proof of it runs in (the digest's config)."""
    validation_files(tmp_path / name)  # first: the image carries its hash, as stamping leaves it
    image_id, digest, ref = tiny(name, labels=stamp_label(tmp_path / name, f"{name}-{RUN}"))
    report = run_folder(tmp_path / name, ref=REF, digest=digest, image_id=image_id, tags=(ref.rsplit(":", 1)[1],))
    return digest, ref, report, image_id


def signer_env(sign_keys) -> dict:
    return {
        **os.environ,
        attest.SIGN_KEY_ENV: str(sign_keys["private"]),
        attest.PASSPHRASE_ENV: sign_keys["passphrase"].read_text().strip(),
    }


def test_a_failed_gpu_proof_leaves_no_signed_result_and_no_tag(sign_keys, tiny, tmp_path):
    """The GPU proof failed: `build.py sign` refuses it (nothing signed), `build.py withdraw` removes the digest
    with its immutable tag, and verify fails: the release's failure path, as release.yml runs it."""
    digest, ref, report, image_id = release_build(tiny, tmp_path, "gpu-failed")
    failed = proof_folder(tmp_path / "proof-failed", image_id, gpu=True, ok=False)
    refused(
        cli(
            "sign", f"{REF}@{digest}", "--report", str(report), "--proof", str(failed), "--require-gpu", env=signer_env(sign_keys)
        ),
        5,
        "the proof did not pass",
        "nothing signed",
    )
    assert listed(digest) == []  # no project-key statement of any kind
    # someone lists another image in this digest's referrers index: withdraw must not delete it
    _, bystander, bystander_ref = tiny("bystander")
    rewrite_index(digest, [{"mediaType": registry.OCI_MANIFEST, "digest": bystander, "size": 1}])
    done = cli("withdraw", f"{REF}@{digest}")
    assert done.returncode == 0, done.stderr
    assert "0 of the 1 artifact(s) listed for it deleted" in done.stdout
    assert client().manifest(ref.rsplit(":", 1)[1]) is None and client().manifest(digest) is None
    assert client().manifest(bystander) is not None and client().manifest(bystander_ref.rsplit(":", 1)[1]) is not None
    refused(verify_cli(ref, "--key", str(sign_keys["public"])), 1, "the registry has no such image")


def test_a_passed_gpu_proof_is_signed_and_verifies_with_require_gpu(sign_keys, tiny, tmp_path):
    digest, ref, report, image_id = release_build(tiny, tmp_path, "gpu-passed")
    cpu_only = proof_folder(tmp_path / "proof-cpu", image_id, gpu=False)
    env = signer_env(sign_keys)
    refused(
        cli("sign", f"{REF}@{digest}", "--report", str(report), "--proof", str(cpu_only), "--require-gpu", env=env), 5, "CPU only"
    )
    passed = proof_folder(tmp_path / "proof-gpu", image_id, gpu=True)
    name = f"https://ci.example/runs/{RUN}"
    sign_args = ("sign", f"{REF}@{digest}", "--report", str(report), "--proof", str(passed), "--require-gpu")
    done = cli(*sign_args, "--run-name", name, env=env)
    assert done.returncode == 0, done.stderr
    verified = verify_cli(ref, "--key", str(sign_keys["public"]), "--require-gpu")
    assert verified.returncode == 0, verified.stderr
    run = json.loads(verify_cli(ref, "--key", str(sign_keys["public"]), "--json").stdout)["images"][0]["run"]
    assert "PASSED on the GPU" in verified.stdout and f"run {run}, {name})" in verified.stdout and len(run) == 32
    assert "built       2026-12-06T00:00:00Z to 2026-12-06T00:05:00Z;" in verified.stdout  # the build's times, not the signing's


# --------------------------------------------------------------------------- only what ran is signed (issue 43)


def sign_cli(sign_keys, digest: str, report, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return cli("sign", f"{REF}@{digest}", "--report", str(report), *extra, env={**signer_env(sign_keys), **(env or {})})


def write_forged(folder, image_id: str | None, record: dict):
    """A proof.json the attacker wrote whole, with a ran.json naming `image_id` (None: none)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "proof.json").write_text(json.dumps(record))
    if image_id is not None:
        (folder / "ran.json").write_text(json.dumps({"image_id": image_id}))
    return folder / "proof.json"


def test_a_forged_one_line_proof_is_never_signed_and_the_real_one_still_is(sign_keys, tiny, tmp_path):
    """The one-line proof that verified with --require-gpu before: refused without the record of where it
    ran, as another line's proof, and as a proof that lists no check; with and without --require-gpu."""
    digest, ref, report, image_id = release_build(tiny, tmp_path, "forged")
    one_line = {"ok": True, "gpu": True, "variant": "2.5-cu121"}
    for gpu in ((), ("--require-gpu",)):
        bare = write_forged(tmp_path / "bare", None, one_line)
        refused(sign_cli(sign_keys, digest, report, "--proof", str(bare), *gpu), 1, "no ran.json beside it", "bound to no image")
        other_line = write_forged(tmp_path / "other-line", image_id, one_line)
        refused(
            sign_cli(sign_keys, digest, report, "--proof", str(other_line), *gpu),
            1,
            "a proof of line 2.5-cu121, not of 2.9-cu128",
        )
        no_checks = write_forged(tmp_path / "no-checks", image_id, {**one_line, "variant": "2.9-cu128"})
        refused(sign_cli(sign_keys, digest, report, "--proof", str(no_checks), *gpu), 1, "lists no result for versions, driver")
    assert listed(digest) == []  # nothing signed, nothing attached
    proof = proof_folder(tmp_path / "real", image_id, gpu=True)
    done = sign_cli(sign_keys, digest, report, "--proof", str(proof), "--require-gpu")
    assert done.returncode == 0, done.stderr
    assert verify_cli(ref, "--key", str(sign_keys["public"]), "--require-gpu").returncode == 0


def test_a_proof_that_ran_in_another_image_is_refused(sign_keys, tiny, tmp_path):
    digest, _, report, _ = release_build(tiny, tmp_path, "ran-elsewhere")
    other_id, _, _ = tiny("the-other-image")
    proof = proof_folder(tmp_path / "proof", other_id, gpu=True)
    refused(
        sign_cli(sign_keys, digest, report, "--proof", str(proof)), 1, f"ran in image {other_id[:19]}", "a proof of another image"
    )
    assert listed(digest) == []


def test_a_validation_record_or_sbom_edited_after_stamping_is_refused(sign_keys, tiny, tmp_path):
    """The build's own proof is validation.json, whose hash the pushed config carries (io.proven-torch.validation-
    sha256): a failed check turned into a pass, or a swapped SBOM, no longer matches, and nothing is signed."""
    digest, ref, report, _ = release_build(tiny, tmp_path, "edited-record")
    folder = report.parent
    original = (folder / "validation.json").read_text()
    record = json.loads(original)
    record["smoke"]["checks"][0]["detail"] = "edited after stamping"
    (folder / "validation.json").write_text(json.dumps(record))
    refused(sign_cli(sign_keys, digest, report), 1, "is not the validation record", "was stamped with")
    (folder / "validation.json").write_text(original)
    sbom = (folder / "sbom.cdx.json").read_bytes()
    (folder / "sbom.cdx.json").write_text(json.dumps({"bomFormat": "CycloneDX", "components": []}))
    refused(sign_cli(sign_keys, digest, report), 1, "is not the SBOM the stamped validation record names")
    (folder / "sbom.cdx.json").write_bytes(sbom)
    facts = json.loads((folder / "facts.json").read_text())  # another line's moving tag added to the run's facts
    (folder / "facts.json").write_text(json.dumps({**facts, "tags": [*facts["tags"], "0.1-cu100"]}))
    refused(sign_cli(sign_keys, digest, report), 1, "names 0.1-cu100, not tags of line", "an edited record")
    assert listed(digest) == []


def test_an_edited_report_naming_another_images_digest_is_refused(sign_keys, tiny, tmp_path):
    """A report whose `pushed` map was edited to name a plain image pushed to the same repository: its config
    in the registry is not the report's stamped image, so nothing is signed (and no predicates are written)."""
    _, _, report, _ = release_build(tiny, tmp_path, "edited")
    _, foreign, _ = tiny("plain-debian")
    data = json.loads(report.read_text())
    data["pushed"][f"{REF}:plain"] = foreign
    report.write_text(json.dumps(data))
    out = tmp_path / "predicates"
    refused(sign_cli(sign_keys, foreign, report, "--prepare", str(out)), 1, "an edited or foreign report")
    assert listed(foreign) == [] and not out.exists()


def test_the_build_own_proof_signs_and_writes_cosigns_predicates_of_the_same_statements(sign_keys, tiny, tmp_path):
    """Without --proof, the build's own validation (ran_in: the validated image) is what is signed; --prepare
    writes the predicates cosign attests, the same statements; without a key only those."""
    digest, ref, report, _ = release_build(tiny, tmp_path, "own-proof")
    only = tmp_path / "only-predicates"
    done = cli("sign", f"{REF}@{digest}", "--report", str(report), "--prepare", str(only))
    assert done.returncode == 0, done.stderr
    assert listed(digest) == [] and (only / "predicates.tsv").is_file()  # nothing signed without a key
    out = tmp_path / "predicates"
    done = sign_cli(sign_keys, digest, report, "--prepare", str(out))
    assert done.returncode == 0, done.stderr
    listed_kinds = dict(line.split("\t") for line in (out / "predicates.tsv").read_text().splitlines())
    assert listed_kinds == {uri: f"{kind}.json" for kind, uri in statements.PREDICATES.items()}
    signed = {s["predicateType"]: s["predicate"] for s in opened(digest, REF, sign_keys["public"])}
    assert json.loads((out / "test-result.json").read_text()) == signed[statements.PREDICATES["test-result"]]
    assert json.loads((out / "subject.json").read_text())["digest"] == digest
    done = verify_cli(ref, "--key", str(sign_keys["public"]))
    assert done.returncode == 0 and "WARNED: on the CPU only" in done.stdout, done.stderr


def test_the_release_prepares_signs_apart_and_attaches_and_a_swapped_envelope_is_refused(sign_keys, tiny, tmp_path):
    """The release's three jobs: `sign --prepare` with no secret, the signer process alone (what the signing job
    runs: .venv-signer, the passphrase in a file), `attach` with no secret; an answer whose envelope signs
    something else than what was prepared is not attached."""
    digest, ref, report, image_id = release_build(tiny, tmp_path, "three-jobs")
    prepared = tmp_path / "prepared"
    proof = proof_folder(tmp_path / "proof", image_id, gpu=True)
    done = cli(
        "sign", f"{REF}@{digest}", "--report", str(report), "--proof", str(proof), "--require-gpu", "--prepare", str(prepared)
    )
    assert done.returncode == 0, done.stderr
    request = {
        "op": "sign",
        "key": str(sign_keys["private"]),
        "passphrase_file": str(sign_keys["passphrase"]),
        "statements": json.loads((prepared / "statements.json").read_text())["statements"],
        "run_name": "https://ci.example/runs/1",
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVEN_TORCH")}
    signer = [str(REPO_ROOT / ".venv-signer" / "bin" / "python"), "-s", "-E", "-m", "pipeline.attest"]
    answer = subprocess.run(
        signer, input=json.dumps(request), capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=120
    )
    assert answer.returncode == 0, answer.stdout + answer.stderr
    signed = tmp_path / "signed.json"
    swapped = json.loads(answer.stdout)
    swapped["envelopes"][0], swapped["envelopes"][1] = swapped["envelopes"][1], swapped["envelopes"][0]
    signed.write_text(json.dumps(swapped))
    refused(cli("attach", f"{REF}@{digest}", "--prepared", str(prepared), "--signed", str(signed)), 1, "signs something other")
    assert listed(digest) == []
    signed.write_text(answer.stdout)
    done = cli("attach", f"{REF}@{digest}", "--prepared", str(prepared), "--signed", str(signed))
    assert done.returncode == 0, done.stderr
    verified = verify_cli(ref, "--key", str(sign_keys["public"]), "--require-gpu")
    assert verified.returncode == 0 and "https://ci.example/runs/1" in verified.stdout, verified.stderr


PROOF_SCRIPT = """#!/bin/sh
# a stand-in `proof`: writes a whole GPU proof record where --out says, as the image's own proof does
out=$2
mkdir -p "$out"
cat /proof.json > "$out/proof.json"
echo "proof: PROVEN (stand-in)"
"""


def test_prove_sh_records_the_image_its_proof_ran_in_and_that_binds_the_signature(docker, matrix, sign_keys, tmp_path):
    """scripts/prove.sh runs the pushed digest's `proof` and writes ran.json from `docker inspect` of the
    container: `build.py sign --proof` accepts that record for this digest, and refuses it for another."""
    context = tmp_path / "context"
    context.mkdir()
    (context / "proof").write_text(PROOF_SCRIPT)
    (context / "proof.json").write_text(json.dumps(proof_record(gpu=True)))
    base = matrix.base_image_for(AMD64)
    validation_files(tmp_path / "run")  # the record its stamp label names, written before the image is built
    tag = f"prove-sh-{RUN}"
    labels = " ".join(f'{label}="{value}"' for label, value in stamp_label(tmp_path / "run", tag).items())
    (context / "Dockerfile").write_text(
        f"FROM {base}\nCOPY --chmod=755 proof /usr/local/bin/proof\nCOPY proof.json /\nLABEL {labels}\n"
    )
    cli_ = find_build_cli()
    iid = tmp_path / "iid"
    subprocess.run(
        [*cli_.argv, "-q", "--iidfile", str(iid), str(context)], env=cli_.environ(), check=True, capture_output=True, timeout=300
    )
    image_id = iid.read_text().strip()
    push.tag_image(docker, image_id, REF, [tag])
    digest = push.push_tag(docker, image_id, REF, tag)
    try:
        out = tmp_path / "proof"
        done = subprocess.run(
            ["bash", "scripts/prove.sh", f"{REF}@{digest}", str(out)],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "PROVE_GPUS": ""},
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        ran = json.loads((out / "ran.json").read_text())
        assert ran["image_id"] == image_id and ran["ref"] == f"{REF}@{digest}" and ran["exit_status"] == 0
        report = run_folder(tmp_path / "run", ref=REF, digest=digest, image_id=image_id, tags=(tag,))
        signed = sign_cli(sign_keys, digest, report, "--proof", str(out / "proof.json"), "--require-gpu")
        assert signed.returncode == 0, signed.stderr
        assert verify_cli(f"{REF}:{tag}", "--key", str(sign_keys["public"]), "--require-gpu").returncode == 0
        other = proof_folder(tmp_path / "other", "sha256:" + "0" * 64, gpu=True)  # a ran.json of another image
        refused(sign_cli(sign_keys, digest, report, "--proof", str(other)), 1, "a proof of another image")
    finally:
        subprocess.run(["docker", "rmi", "-f", f"{REF}:{tag}"], capture_output=True, check=False)


def test_a_released_multi_arch_index_is_prepared_from_its_children_signed_apart_and_verifies(sign_keys, tiny, tmp_path):
    """The release's index: each child signed and prepared, the index pushed, `sign --children` prepares its
    statements only when the index lists exactly those children; signed by the signer alone and attached,
    `verify` of the multi-arch tag passes (it always failed for a released index before)."""
    prepared, children = [], []
    for platform in (AMD64, ARM64):
        tag = push.arch_tag(f"rel-{RUN}", platform)
        validation_files(tmp_path / arch(platform), platform=platform)
        image_id, digest, _ = tiny(
            "rel-line", platform=platform, tag=tag, labels=stamp_label(tmp_path / arch(platform), f"rel-{RUN}")
        )
        report = run_folder(tmp_path / arch(platform), ref=REF, digest=digest, image_id=image_id, platform=platform, tags=(tag,))
        folder = tmp_path / f"prepared-{arch(platform)}"
        done = sign_cli(sign_keys, digest, report, "--prepare", str(folder))  # signs the child and prepares it
        assert done.returncode == 0, done.stderr
        prepared.append(str(folder))
        children.append(push.Child(platform, REF, tag, digest, image_id))
    index = push.push_index(REF, f"rel-{RUN}", children)
    other = tmp_path / "other"
    other.mkdir()
    (other / "subject.json").write_text(json.dumps({"name": REF, "digest": "sha256:" + "0" * 64, "variant": "2.9-cu128"}))
    (other / "validation.json").write_text(json.dumps(validation()))
    refused(
        cli("sign", f"{REF}@{index}", "--children", prepared[0], str(other), "--prepare", str(tmp_path / "x")),
        1,
        "but the prepared children name",
    )
    facts_path = Path(prepared[0]) / "facts.json"  # the provenance's tags: another line's added to a child's facts
    genuine = facts_path.read_text()
    facts_path.write_text(json.dumps({**json.loads(genuine), "tags": [*json.loads(genuine)["tags"], "0.1-cu100"]}))
    refused(cli("sign", f"{REF}@{index}", "--children", *prepared, "--prepare", str(tmp_path / "y")), 1, "names 0.1-cu100")
    facts_path.write_text(genuine)
    out = tmp_path / "index"
    done = cli("sign", f"{REF}@{index}", "--children", *prepared, "--prepare", str(out))
    assert done.returncode == 0, done.stderr
    signed = attest.sign(key_of(sign_keys), json.loads((out / "statements.json").read_text())["statements"])
    answer = {
        "keyid": signed.keyid,
        "envelopes": [base64.b64encode(e).decode() for e in signed.envelopes],
        "run": signed.run,
        "signed_at": signed.signed_at,
    }
    (tmp_path / "signed.json").write_text(json.dumps(answer))
    done = cli("attach", f"{REF}@{index}", "--prepared", str(out), "--signed", str(tmp_path / "signed.json"))
    assert done.returncode == 0, done.stderr
    verified = verify_cli(f"{REF}:rel-{RUN}", "--key", str(sign_keys["public"]))
    assert verified.returncode == 0 and "2 image(s)" in verified.stdout, verified.stderr


def diff_cli(*args: str) -> subprocess.CompletedProcess:
    return cli("diff", *args)


def test_diff_compares_two_signed_images_and_names_each_regression(sign_keys, tiny, tmp_path):
    """Against the real registry: a package bump, a slower benchmark on the same CPU (exit 1, named in --json),
    the same on another CPU (no ratio), a side signed with another key or not at all, diff A A, --markdown,
    and --advisories re-auditing both SBOMs against a fixture record that affects only B's numpy."""
    public = str(sign_keys["public"])
    made = {}
    for name, numpy, sps, cpu in (
        ("a", "2.1.0", 1000.0, "Test CPU"),
        ("b", "2.2.0", 600.0, "Test CPU"),
        ("c", "2.2.0", 600.0, "Other CPU"),
    ):
        image_id, digest, ref = tiny(f"diff-{name}")
        record = validation()
        record["ppo"]["sps_end_to_end"], record["proof"]["where"]["cpu"] = sps, cpu
        sign(
            sign_keys,
            tmp_path,
            ref,
            digest,
            image_id,
            record=record,
            components=("pkg:pypi/torch@1.0.1", f"pkg:pypi/numpy@{numpy}"),
        )
        made[name] = ref
    done = diff_cli(made["a"], made["a"], "--key", public)
    assert done.returncode == 0 and done.stdout.strip().endswith("no differences: the same image (one digest)"), done.stdout
    slower = diff_cli(made["a"], made["b"], "--key", public, "--json")
    record = json.loads(slower.stdout)
    assert slower.returncode == 1 and record["packages"]["changed"] == ["pypi/numpy 2.1.0 -> 2.2.0"]
    assert record["speed"]["ratio"] == 0.6 and len(record["regressions"]) == 1 and "0.60x A's" in record["regressions"][0]
    assert diff_cli(made["a"], made["b"], "--key", public, "--max-slowdown", "0.5").returncode == 0
    other = json.loads(diff_cli(made["a"], made["c"], "--key", public, "--json").stdout)
    assert (
        other["speed"]["ratio"] is None and "different hardware" in other["speed"]["why_no_ratio"] and other["regressions"] == []
    )
    _, unsigned, unsigned_ref = tiny("diff-unsigned")
    done = diff_cli(made["a"], unsigned_ref, "--key", public)
    assert done.returncode == 1 and "B NOT verified" in done.stdout and "REGRESSION B does not verify" in done.stdout
    _, other_public, _ = attest.keygen(tmp_path / "other-key")
    done = diff_cli(made["a"], made["b"], "--key", str(other_public), "--max-slowdown", "0.5")
    assert done.returncode == 1 and "A NOT verified" in done.stdout and "none of its 6 statements is signed by key" in done.stdout
    assert diff_cli(made["a"], made["b"], "--key", public, "--markdown").stdout.startswith("| | A | B |")
    osv = tmp_path / "osv"
    osv.mkdir()
    (osv / "PYSEC-TEST-1.json").write_text(json.dumps({
        "id": "PYSEC-TEST-1", "modified": "2026-12-01T00:00:00Z", "summary": "a test advisory",
        "affected": [{"package": {"ecosystem": "PyPI", "name": "numpy"}, "versions": ["2.2.0"]}],
        "database_specific": {"severity": "CRITICAL"},
    }))  # fmt: skip
    done = diff_cli(made["a"], made["c"], "--key", public, "--advisories", str(osv), "--json")
    record = json.loads(done.stdout)
    assert (
        done.returncode == 1 and record["security"]["reaudited"] and record["security"]["new_unaccepted_high"] == ["PYSEC-TEST-1"]
    ), done.stdout


def test_diff_of_a_multi_arch_tag_compares_the_platform_asked_for(sign_keys, tiny, tmp_path):
    children = []
    for platform in (AMD64, ARM64):
        tag = push.arch_tag(f"diffline-{RUN}", platform)
        image_id, digest, ref = tiny("diff-line", platform=platform, tag=tag)
        sign(sign_keys, tmp_path, ref, digest, image_id, platform)
        children.append(push.Child(platform, REF, tag, digest, image_id))
    index = push.push_index(REF, f"diffline-{RUN}", children)
    about = [{"platform": c.platform, "digest": c.digest, "validation": validation()} for c in children]
    facts = Facts.load(next(tmp_path.glob("run-*")).joinpath("facts.json"))
    sign_digest(key_of(sign_keys), client(), index, index_statements(Subject(REF, index), facts, [f"diffline-{RUN}"], about))
    for platform, child in ((AMD64, children[0]), (ARM64, children[1])):
        done = diff_cli(
            f"{REF}:diffline-{RUN}", f"{REF}@{child.digest}", "--key", str(sign_keys["public"]), "--platform", platform
        )
        assert done.returncode == 0 and "no differences" in done.stdout, done.stdout + done.stderr


def test_the_signer_chooses_the_run_and_time_a_wrong_clock_is_caught(sign_keys, tiny, tmp_path):
    """Two signings with one --run-name are two runs (the id is the signer's); --run-id is gone; a signer whose
    clock is ten years ahead signs, and verify refuses that run instead of letting it win over every other."""
    digest, ref, report, _ = release_build(tiny, tmp_path, "clock")
    refused(sign_cli(sign_keys, digest, report, "--run-id", "release"), 2, "--run-id")
    runs = set()
    for _ in range(2):
        done = sign_cli(sign_keys, digest, report, "--run-name", "release")
        assert done.returncode == 0, done.stderr
        runs.add(json.loads(verify_cli(ref, "--key", str(sign_keys["public"]), "--json").stdout)["images"][0]["run"])
    assert len(runs) == 2
    request = SignRequest(registry.parse_ref(f"{REF}@{digest}"), report, key_of(sign_keys))
    with signer_clock("+3650d"):  # the signer process's clock only (build.py's own waits misbehave under libfaketime)
        sign_command(request)
    refused(verify_cli(ref, "--key", str(sign_keys["public"]), "--max-age", "1"), 1, "ahead of this host's clock")


# --------------------------------------------------------------------------- TLS for every push path


class _Recorder(BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self):  # noqa: N802
        self.seen.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_HEAD = do_POST = do_PUT = do_GET  # noqa: N815

    def log_message(self, *args):
        pass


def test_a_registry_that_only_resolves_to_loopback_is_refused_before_the_build(tmp_path):
    """127.1 resolves to 127.0.0.1 but is not written as loopback: Docker would push there without TLS, so
    build.py refuses it before building, and the plain-HTTP server behind it is never spoken to."""
    seen: list[str] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Recorder", (_Recorder,), {"seen": seen}))
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        host = f"127.1:{server.server_address[1]}"
        done = cli("--push", "--registry", host, "--allow-cpu-validation", "--report-dir", str(tmp_path))
        refused(done, 2, f"--registry {host} refused", "resolves to 127.0.0.1", "without TLS")
        assert seen == []
    finally:
        server.shutdown()


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
