"""Keys, DSSE envelopes, the statements' contents and verify's rules, without a registry.
The registry side (attach, read back, tampering) is tests/image/test_signed_proof.py."""

from __future__ import annotations

import base64
import importlib.util
import json
import os
from pathlib import Path

import jsonschema
import pytest

from pipeline import signing, statements, verify
from pipeline.errors import NotVerified, UsageError
from pipeline.referrers import parse_ref
from pipeline.statements import GPU_TESTS, PREDICATES, Subject
from tests.records import validation

pytestmark = pytest.mark.unit

SUBJECT = Subject("localhost:5000/proven-torch", "sha256:" + "a" * 64)


@pytest.fixture(scope="module")
def keypair(tmp_path_factory):
    private, public = signing.keygen(tmp_path_factory.mktemp("keys") / "k")
    return signing.load_signing_key(private), signing.load_public_key(public), private, public


# --------------------------------------------------------------------------- keys


def test_keygen_writes_a_private_key_only_its_owner_reads(keypair):
    _, _, private, public = keypair
    assert private.stat().st_mode & 0o777 == 0o600
    assert public.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    assert b"PRIVATE KEY" in private.read_bytes()


def test_keygen_never_overwrites_a_key(keypair):
    _, _, private, _ = keypair
    with pytest.raises(UsageError, match="never overwrites"):
        signing.keygen(private.parent)


def test_a_key_inside_the_checkout_is_refused(tmp_path):
    inside = Path(signing.REPO_ROOT) / "reports" / "unit-test-key" / signing.PRIVATE_NAME
    with pytest.raises(UsageError, match="build context"):
        signing.load_signing_key(inside)
    with pytest.raises(UsageError, match="build context"):
        signing.keygen(inside.parent)
    assert not inside.parent.exists()


def test_a_key_others_can_read_is_refused(keypair, tmp_path):
    _, _, private, _ = keypair
    loose = tmp_path / "loose.key"
    loose.write_bytes(private.read_bytes())
    os.chmod(loose, 0o644)
    with pytest.raises(UsageError, match="chmod 600"):
        signing.load_signing_key(loose)


@pytest.mark.parametrize(
    ("content", "match"),
    [(None, "cannot read"), (b"not a key", "not an unencrypted PEM private key")],
    ids=["missing", "garbage"],
)
def test_a_bad_private_key_is_one_line(tmp_path, content, match):
    path = tmp_path / "bad.key"
    if content is not None:
        path.write_bytes(content)
        os.chmod(path, 0o600)
    with pytest.raises(UsageError, match=match):
        signing.load_signing_key(path)


def test_a_bad_public_key_is_one_line(tmp_path, keypair):
    _, _, private, _ = keypair
    with pytest.raises(UsageError, match="cannot read"):
        signing.load_public_key(tmp_path / "nope.pub")
    with pytest.raises(UsageError, match="not a PEM public key"):
        signing.load_public_key(private)


def test_the_key_object_never_prints_its_material(keypair):
    key, _, private, _ = keypair
    body = private.read_text().splitlines()[1]
    assert body not in repr(key) and body not in str(key)


def test_the_env_variable_names_the_key_when_no_flag_does(monkeypatch, tmp_path):
    monkeypatch.setenv(signing.SIGN_KEY_ENV, str(tmp_path / "env.key"))
    assert signing.sign_key_path(None) == tmp_path / "env.key"
    assert signing.sign_key_path(tmp_path / "flag.key") == tmp_path / "flag.key"
    monkeypatch.delenv(signing.SIGN_KEY_ENV)
    assert signing.sign_key_path(None) is None


# --------------------------------------------------------------------------- envelopes


def test_a_signed_statement_opens_with_its_public_key(keypair):
    key, public, _, _ = keypair
    stmt = statements.statement("benchmark", SUBJECT, {"x": 1})
    assert signing.open_envelope(signing.sign(key, stmt), public, "test") == stmt


def test_one_changed_byte_of_the_payload_fails_the_signature(keypair):
    key, public, _, _ = keypair
    envelope = json.loads(signing.sign(key, statements.statement("test-result", SUBJECT, {"result": "FAILED"})))
    payload = base64.b64decode(envelope["payload"]).replace(b"FAILED", b"PASSED")
    envelope["payload"] = base64.b64encode(payload).decode()
    with pytest.raises(NotVerified, match="signature does not verify"):
        signing.open_envelope(json.dumps(envelope).encode(), public, "the test-result statement")


def test_another_key_does_not_verify(keypair, tmp_path):
    key, _, _, _ = keypair
    _, other_public = signing.keygen(tmp_path / "other")
    with pytest.raises(NotVerified, match="signed with another key"):
        signing.open_envelope(signing.sign(key, {"a": 1}), signing.load_public_key(other_public), "x")


def test_an_envelope_of_another_payload_type_is_refused(keypair):
    key, public, _, _ = keypair
    envelope = json.loads(signing.sign(key, {"a": 1}))
    envelope["payloadType"] = "text/plain"
    with pytest.raises(NotVerified, match="not an in-toto statement"):
        signing.open_envelope(json.dumps(envelope).encode(), public, "x")


# --------------------------------------------------------------------------- what the statements say


def test_a_cpu_only_proof_is_warned_naming_the_gpu_checks_that_did_not_run():
    outcome = statements.test_outcome(validation(gpu=False))
    assert outcome["result"] == "WARNED"
    assert set(outcome["warned"]) == {"smoke/driver", "smoke/gpu", "ppo-gate/cuda"} <= set(GPU_TESTS) | set(outcome["warned"])
    assert set(outcome["warned"]) <= set(GPU_TESTS)
    assert "ppo-gate/cpu" in outcome["passed"] and "smoke/gpu" not in outcome["passed"]
    assert outcome["reasons"]["smoke/gpu"] == "no GPU visible"


def test_a_gpu_proof_passes_and_a_failed_one_fails():
    assert statements.test_outcome(validation(gpu=True))["result"] == "PASSED"
    failed = statements.test_outcome(validation(ok=False))
    assert failed["result"] == "FAILED" and "smoke/compile" in failed["failed"]


def test_a_flavor_gate_is_its_own_test():
    record = validation(gpu=True)
    record["proof"]["rlhf"] = {"ok": True}
    assert "rlhf-gate" in statements.test_outcome(record, "rlhf")["passed"]
    assert "rlhf-gate" not in statements.test_outcome(record, "base")["passed"]


def test_an_index_result_is_the_worst_of_its_children():
    assert statements.combined_result(["PASSED", "WARNED"]) == "WARNED"
    assert statements.combined_result(["PASSED", "FAILED", "WARNED"]) == "FAILED"
    assert statements.combined_result(["PASSED", "PASSED"]) == "PASSED"


def test_the_benchmark_predicate_matches_its_schema():
    schema = json.loads(statements.BENCHMARK_SCHEMA.read_text())
    assert schema["$id"] == PREDICATES["benchmark"]
    for gpu in (False, True):
        predicate = statements.benchmark_predicate(validation(gpu=gpu), {"machine": "x86_64", "system": "Linux"})
        jsonschema.validate(predicate, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**predicate, "steps_per_second": "fast"}, schema)


def test_each_accepted_advisory_is_a_vex_statement_with_its_reason_and_expiry():
    vex = statements.vex_predicate(validation()["audit"], "ref@sha256:x", "author", "2026-12-05T00:00:00Z")
    (entry,) = vex["statements"]
    assert entry["vulnerability"]["name"] == "PYSEC-2025-1" and entry["status"] == "affected"
    assert "2027-06-01" in entry["action_statement"] and "kept on purpose" in entry["action_statement"]
    vulns = statements.vulns_predicate(validation()["audit"], "abc")
    assert vulns["scanner"]["db"]["lastUpdate"] == "2026-07-23" and vulns["scanner"]["result"][0]["id"] == "PYSEC-2025-1"


# --------------------------------------------------------------------------- verify's rules


def test_verify_accepts_warned_only_for_gpu_checks_and_never_with_require_gpu():
    cpu = statements.test_result_predicate(validation(gpu=False), "sha256:i", [])
    verify.judge_result(cpu, require_gpu=False, label="x")
    with pytest.raises(NotVerified, match="--require-gpu"):
        verify.judge_result(cpu, require_gpu=True, label="x")
    verify.judge_result(statements.test_result_predicate(validation(gpu=True), "sha256:i", []), require_gpu=True, label="x")
    with pytest.raises(NotVerified, match="not GPU checks"):
        verify.judge_result({**cpu, "warnedTests": ["smoke/versions"]}, require_gpu=False, label="x")
    with pytest.raises(NotVerified, match="FAILED"):
        verify.judge_result({**cpu, "result": "FAILED", "failedTests": ["smoke/compile"]}, require_gpu=False, label="x")


def test_an_index_child_warned_for_a_gpu_check_is_still_a_gpu_check():
    verify.judge_result({"result": "WARNED", "warnedTests": ["arm64/smoke/gpu", "amd64/ppo-gate/cuda"]}, False, "x")


@pytest.mark.parametrize(
    ("text", "host", "repo", "reference"),
    [
        ("localhost:5000/proven-torch:2.9-cu128", "localhost:5000", "proven-torch", "2.9-cu128"),
        ("ghcr.io/org/proven-torch@sha256:" + "b" * 64, "ghcr.io", "org/proven-torch", "sha256:" + "b" * 64),
        ("proven-torch", "docker.io", "library/proven-torch", "latest"),
    ],
)
def test_image_references_parse(text, host, repo, reference):
    ref = parse_ref(text)
    assert (ref.host, ref.repo, ref.reference) == (host, repo, reference)


def test_a_malformed_reference_is_bad_input():
    with pytest.raises(UsageError, match="not an image reference"):
        parse_ref("Not A Ref!")


# --------------------------------------------------------------------------- the hygiene scan knows the key


def test_the_hygiene_scan_finds_a_signing_key_copied_into_an_image(tmp_path, keypair):
    _, _, private, _ = keypair
    spec = importlib.util.spec_from_file_location("hygiene_scan", Path(signing.REPO_ROOT) / "container" / "hygiene_scan.py")
    scanner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scanner)
    planted = tmp_path / "opt" / "app" / "signing.key"
    planted.parent.mkdir(parents=True)
    planted.write_bytes(private.read_bytes())
    assert "private key: /opt/app/signing.key" in scanner.scan(str(tmp_path), [])


def test_build_py_list_says_whether_pushes_are_signed(monkeypatch, keypair):
    from pipeline.listing import signing_line

    key, _, private, _ = keypair
    monkeypatch.delenv(signing.SIGN_KEY_ENV, raising=False)
    assert signing_line().startswith("signing: unsigned")
    monkeypatch.setenv(signing.SIGN_KEY_ENV, str(private))
    assert signing_line() == f"signing: pushes are signed with key {key.keyid[:16]}… (PROVEN_TORCH_SIGN_KEY)"
