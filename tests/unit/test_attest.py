"""Keys and the signer process, DSSE envelopes, the statements' contents and how verify reads them and
decides between runs, without a registry. The registry side (attach, read back, tampering) is
tests/image/test_signed_proof.py; hostile registries are tests/unit/test_verify_registry.py."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import importlib.util
import json
import os
from pathlib import Path

import jsonschema
import pytest

from pipeline import attest, statements, verify
from pipeline.errors import NotVerified, PushFailed, RegistryDataRefused, UsageError
from pipeline.records import Facts
from pipeline.registry import parse_ref
from pipeline.signed_statements import Provenance, Signed, TestResult, Vulns, read_statement
from pipeline.statements import GPU_TESTS, PREDICATES, Subject
from tests.records import signable, validation

pytestmark = pytest.mark.unit

DIGEST = "sha256:" + "a" * 64
SUBJECT = Subject("localhost:5000/proven-torch", DIGEST)


def stamped(kind: str, predicate: dict, run: str = "run-1", when: str = "2026-12-06T10:00:00Z") -> dict:
    """A statement as the signer stamps it before signing (statements.stamp_run)."""
    return statements.stamp_run(statements.statement(kind, SUBJECT, predicate), run, when, None)


@pytest.fixture(scope="module")
def keypair(tmp_path_factory):
    private, public, keyid = attest.keygen(tmp_path_factory.mktemp("keys") / "k")
    return attest.KeySource(private), attest.load_public_key(public), keyid


@pytest.fixture(scope="module")
def encrypted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("enc")
    passphrase = folder / "passphrase"
    passphrase.write_text("correct horse\n")
    passphrase.chmod(0o600)
    private, public, keyid = attest.keygen(folder / "k", encrypt=True, passphrase_file=passphrase)
    return private, passphrase, keyid


def signed(key: attest.KeySource, stmt: dict) -> dict:
    (envelope,) = attest.sign(key, [stmt]).envelopes
    return json.loads(envelope)


# --------------------------------------------------------------------------- keys, read by the signer only


def test_keygen_writes_a_private_key_only_its_owner_reads(keypair):
    source, _, _ = keypair
    assert source.path.stat().st_mode & 0o777 == 0o600
    assert source.path.with_name(attest.PUBLIC_NAME).read_text().startswith("-----BEGIN PUBLIC KEY-----")
    assert b"PRIVATE KEY" in source.path.read_bytes()


def test_keygen_never_overwrites_a_key_nor_writes_through_a_link(keypair, tmp_path):
    with pytest.raises(UsageError, match="never overwrites"):
        attest.keygen(keypair[0].path.parent)
    folder = tmp_path / "links"
    folder.mkdir()
    (folder / attest.PUBLIC_NAME).symlink_to(tmp_path / "elsewhere.pub")  # dangling: writing it would create elsewhere.pub
    with pytest.raises(UsageError, match="exists \\(or is a link\\)"):
        attest.keygen(folder)
    assert not (tmp_path / "elsewhere.pub").exists() and not (folder / attest.PRIVATE_NAME).exists()
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    with pytest.raises(UsageError, match="is a symlink"):
        attest.keygen(tmp_path / "linked")


def test_an_encrypted_key_signs_with_its_passphrase_from_a_file_or_the_environment(encrypted, monkeypatch):
    private, passphrase, keyid = encrypted
    assert b"ENCRYPTED PRIVATE KEY" in private.read_bytes()
    assert attest.check_key(attest.KeySource(private, passphrase)) == keyid
    monkeypatch.setenv(attest.PASSPHRASE_ENV, "correct horse")
    assert attest.check_key(attest.KeySource(private)) == keyid


def test_an_encrypted_key_without_its_passphrase_or_with_a_wrong_one_is_one_line(encrypted, monkeypatch, tmp_path):
    private, _, _ = encrypted
    monkeypatch.delenv(attest.PASSPHRASE_ENV, raising=False)
    with pytest.raises(UsageError, match="is encrypted: give its passphrase in \\$PROVEN_TORCH_SIGN_KEY_PASSPHRASE"):
        attest.check_key(attest.KeySource(private))
    wrong = tmp_path / "wrong"
    wrong.write_text("battery staple\n")
    wrong.chmod(0o600)
    with pytest.raises(UsageError, match="the passphrase is wrong"):
        attest.check_key(attest.KeySource(private, wrong))
    with pytest.raises(UsageError, match="keygen --encrypt needs a passphrase"):
        attest.keygen(tmp_path / "no-passphrase", encrypt=True)


def test_a_passphrase_file_others_can_read_and_a_key_folder_others_can_write_are_refused(encrypted, tmp_path):
    private, passphrase, _ = encrypted
    loose = tmp_path / "loose-passphrase"
    loose.write_text(passphrase.read_text())
    loose.chmod(0o644)
    with pytest.raises(UsageError, match="readable by others.*chmod 600"):
        attest.check_key(attest.KeySource(private, loose))
    shared = tmp_path / "shared-keys"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UsageError, match="writable by others.*chmod go-w"):
        attest.keygen(shared)
    assert not (shared / attest.PRIVATE_NAME).exists()


def test_a_key_inside_the_checkout_is_refused(tmp_path):
    inside = attest.REPO_ROOT / "reports" / "unit-test-key" / attest.PRIVATE_NAME
    with pytest.raises(UsageError, match="build context"):
        attest.check_key(attest.KeySource(inside))
    with pytest.raises(UsageError, match="build context"):
        attest.keygen(inside.parent)
    assert not inside.parent.exists()


def test_a_key_others_can_read_is_refused(keypair, tmp_path):
    loose = tmp_path / "loose.key"
    loose.write_bytes(keypair[0].path.read_bytes())
    os.chmod(loose, 0o644)
    with pytest.raises(UsageError, match="chmod 600"):
        attest.check_key(attest.KeySource(loose))


@pytest.mark.parametrize(
    ("content", "match"), [(None, "cannot read"), (b"not a key", "not a PEM private key")], ids=["missing", "garbage"]
)
def test_a_bad_private_key_is_one_line(tmp_path, content, match):
    path = tmp_path / "bad.key"
    if content is not None:
        path.write_bytes(content)
        os.chmod(path, 0o600)
    with pytest.raises(UsageError, match=match):
        attest.check_key(attest.KeySource(path))


def test_a_bad_public_key_is_one_line(tmp_path, keypair):
    with pytest.raises(UsageError, match="cannot read"):
        attest.load_public_key(tmp_path / "nope.pub")
    with pytest.raises(UsageError, match="not a PEM public key"):
        attest.load_public_key(keypair[0].path)


def test_the_env_variable_names_the_key_when_no_flag_does(monkeypatch, tmp_path):
    monkeypatch.setenv(attest.SIGN_KEY_ENV, str(tmp_path / "env.key"))
    assert attest.key_source(None) == attest.KeySource(tmp_path / "env.key")
    assert attest.key_source(tmp_path / "flag.key", tmp_path / "p") == attest.KeySource(tmp_path / "flag.key", tmp_path / "p")
    monkeypatch.delenv(attest.SIGN_KEY_ENV)
    assert attest.key_source(None) is None


def test_without_the_signers_venv_nothing_is_signed_in_the_builds_process(monkeypatch, tmp_path, keypair):
    monkeypatch.setenv(attest.SIGNER_PYTHON_ENV, str(tmp_path / "no-python"))
    with pytest.raises(UsageError, match="the signer's venv is missing .* scripts/host-venv.sh"):
        attest.sign(keypair[0], [{"a": 1}])


def test_the_signer_process_imports_nothing_of_the_builds_venv(keypair):
    """What the signer loads while it signs: the standard library, cryptography, securesystemslib (and what
    they need), pipeline.attest, pipeline.errors and pipeline.statements, common.rules (standard library
    only); no requests, no docker, nothing else of pipeline/."""
    import subprocess

    request = {"op": "sign", "key": str(keypair[0].path), "passphrase_file": None, "statements": [{"a": 1}]}
    probe = (
        "import runpy, sys\n"
        "try:\n    runpy.run_module('pipeline.attest', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print('\\n'.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [attest._signer_python(), "-s", "-E", "-c", probe],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd=attest.REPO_ROOT,
        timeout=60,
    )
    assert "envelopes" in json.loads(done.stdout), done.stdout
    modules = done.stderr.splitlines()
    ours = {m for m in modules if m.split(".")[0] in ("pipeline", "common")}
    own = {"pipeline", "pipeline.errors", "pipeline.statements", "pipeline.records", "common", "common.rules", "common.cli"}
    assert ours == own, ours
    assert "securesystemslib" in modules and not {m.split(".")[0] for m in modules} & {"requests", "docker", "urllib3", "yaml"}


# --------------------------------------------------------------------------- envelopes


def test_a_signed_statement_opens_with_its_public_key(keypair):
    source, public, _ = keypair
    stmt = statements.statement("benchmark", SUBJECT, {"x": 1})
    opened = json.loads(attest.open_envelope(signed(source, stmt), public, "test"))
    assert opened["predicate"] == stmt["predicate"] and opened["subject"][0]["digest"] == stmt["subject"][0]["digest"]


def test_one_changed_byte_of_the_payload_fails_the_signature(keypair):
    source, public, _ = keypair
    envelope = signed(source, statements.statement("test-result", SUBJECT, {"result": "FAILED"}))
    envelope["payload"] = base64.b64encode(base64.b64decode(envelope["payload"]).replace(b"FAILED", b"PASSED")).decode()
    with pytest.raises(NotVerified, match="signature does not verify"):
        attest.open_envelope(envelope, public, "the test-result statement")


def test_another_key_does_not_verify(keypair, tmp_path):
    _, other_public, _ = attest.keygen(tmp_path / "other")
    with pytest.raises(NotVerified, match="signed with another key"):
        attest.open_envelope(signed(keypair[0], {"a": 1}), attest.load_public_key(other_public), "x")


def test_an_envelope_of_another_payload_type_or_shape_is_refused(keypair):
    envelope = {**signed(keypair[0], {"a": 1}), "payloadType": "text/plain"}
    with pytest.raises(NotVerified, match="not an in-toto statement"):
        attest.open_envelope(envelope, keypair[1], "x")
    with pytest.raises(RegistryDataRefused, match="not a DSSE envelope"):
        attest.open_envelope({"payload": 3}, keypair[1], "x")


# --------------------------------------------------------------------------- what the statements say


def test_a_cpu_only_proof_is_warned_naming_the_gpu_checks_that_did_not_run():
    outcome = statements.test_outcome(validation(gpu=False))
    assert outcome["result"] == "WARNED"
    assert set(outcome["warned"]) == set(GPU_TESTS)  # every GPU check, and the gate on a GPU
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
    schema = json.loads((attest.REPO_ROOT / "pipeline" / "schemas" / "ppo-benchmark-v1.schema.json").read_text())
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


def test_the_signer_stamps_its_own_run_and_clock_whatever_the_caller_wrote(keypair):
    """The caller cannot choose the run or the time: the signer replaces both, one run per signing."""
    source, public, _ = keypair
    forged = statements.stamp_run(statements.statement("sbom", SUBJECT, {}), "chosen-run", "2036-01-01T00:00:00Z", None)
    first, second = attest.sign(source, [forged, forged], run_name="https://ci.example/runs/7"), attest.sign(source, [forged])
    assert first.run != second.run and len(first.run) == 32 and first.run != "chosen-run"
    assert abs(
        dt.datetime.strptime(first.signed_at, statements.TIME_FORMAT).replace(tzinfo=dt.UTC) - dt.datetime.now(dt.UTC)
    ) < dt.timedelta(minutes=1)
    for envelope in first.envelopes:
        got = read_statement(json.loads(attest.open_envelope(json.loads(envelope), public, "t")), "t")
        assert (got.run, f"{got.signed_at:%Y-%m-%dT%H:%M:%SZ}", got.run_name) == (
            first.run,
            first.signed_at,
            "https://ci.example/runs/7",
        )


def test_a_run_name_that_is_not_a_short_printable_label_is_refused(keypair):
    for name in ("x" * 301, "line\nbreak"):
        with pytest.raises(UsageError, match="--run-name"):
            attest.sign(keypair[0], [statements.statement("sbom", SUBJECT, {})], run_name=name)


# --------------------------------------------------------------------------- reading statements back, typed


def test_a_statement_reads_back_into_its_typed_record():
    stmt = stamped("test-result", statements.test_result_predicate(validation(gpu=True), "sha256:i", []))
    got = read_statement(stmt, "x")
    assert (got.kind, got.digest, got.run) == ("test-result", DIGEST, "run-1")
    assert got.signed_at == dt.datetime(2026, 12, 6, 10, tzinfo=dt.UTC)
    assert got.record.result == "PASSED" and got.record.image_id == "sha256:i"


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda s: s.pop("_type"), "not an in-toto v1 statement"),
        (lambda s: s.update(predicateType="https://example.com/x"), "none this tool signs"),
        (lambda s: s.update(subject=[]), "not about exactly one subject"),
        (lambda s: s["subject"][0].pop("annotations"), "not stamped by the signer"),
        (lambda s: s["subject"][0]["annotations"].pop(statements.STAMPED_ANNOTATION), "sign the image again"),
        (lambda s: s["subject"][0]["annotations"].update({statements.SIGNED_ANNOTATION: "yesterday"}), "signed-at is not a time"),
        (lambda s: s["predicate"].update(result="MAYBE"), "result is not one of PASSED, WARNED, FAILED"),
        (lambda s: s["predicate"].update(warnedTests="smoke/gpu"), "warnedTests is not a list"),
        (lambda s: s["predicate"].update(warnedTests=[1]), "warnedTests is not a list of strings"),
    ],
    ids=["type", "predicate-type", "subjects", "no-run", "old-signer", "bad-time", "result", "warned-string", "warned-ints"],
)
def test_a_statement_of_the_wrong_shape_is_registry_data_refused(change, said):
    stmt = stamped("test-result", statements.test_result_predicate(validation(), "sha256:i", []))
    change(stmt)
    with pytest.raises(RegistryDataRefused, match=said):
        read_statement(stmt, "x")


def test_a_provenance_names_its_line_and_tags():
    predicate = statements.provenance_predicate(facts("2.9-cu128", "i", "s"), "linux/amd64", ["2.9-cu128", "latest"], [], "b")
    record = read_statement(stamped("provenance", predicate), "x").record
    assert record.line == "2.9-cu128" and record.tags == ("2.9-cu128", "latest")


def facts(line: str, invocation: str, when: str) -> Facts:
    return Facts(
        command=(), commit="r", started=when, finished=when, invocation=invocation, tools={}, dependencies=(), line=line,
        flavor=None, platform="p", ref="h/r", tags=(), stamped_image_id="sha256:i",
    )  # fmt: skip


# --------------------------------------------------------------------------- verify's rules


def stmt_at(kind: str, run: str, when: str) -> Signed:
    predicates = {
        "test-result": statements.test_result_predicate(validation(), "sha256:i", []),
        "provenance": statements.provenance_predicate(facts("l", run, when), "p", ["t"], [], "b"),
    }
    return read_statement(stamped(kind, predicates[kind], run, when), "x")


def test_the_newest_signed_run_decides_whatever_order_the_registry_lists_them_in():
    old = [stmt_at(k, "old", "2026-01-01T00:00:00Z") for k in ("provenance", "test-result")]
    new = [stmt_at(k, "new", "2026-06-01T00:00:00Z") for k in ("provenance", "test-result")]
    for listing in (old + new, new + old, [old[1], new[0], old[0], new[1]]):
        assert verify.deciding_run(listing, ("provenance", "test-result"), "x").run == "new"


def test_statements_of_one_kind_from_different_runs_mixed_are_refused():
    """Run B's test result dropped: its provenance is newest, the newest test result is run A's."""
    listing = [stmt_at("provenance", "A", "2026-01-01T00:00:00Z"), stmt_at("test-result", "A", "2026-01-01T00:00:00Z")]
    listing.append(stmt_at("provenance", "B", "2026-06-01T00:00:00Z"))
    with pytest.raises(NotVerified, match="statements of different runs are mixed"):
        verify.deciding_run(listing, ("provenance", "test-result"), "x")


def test_an_incomplete_run_and_a_tie_between_runs_are_refused():
    with pytest.raises(NotVerified, match="incomplete: no signed test-result"):
        verify.deciding_run([stmt_at("provenance", "A", "2026-01-01T00:00:00Z")], ("provenance", "test-result"), "x")
    tie = [stmt_at("test-result", "A", "2026-01-01T00:00:00Z"), stmt_at("test-result", "B", "2026-01-01T00:00:00Z")]
    with pytest.raises(NotVerified, match="at the same second"):
        verify.deciding_run(tie, ("test-result",), "x")


def test_verify_accepts_warned_only_for_gpu_checks_and_never_with_require_gpu():
    def result(gpu: bool = False, **change) -> TestResult:
        stmt = stamped("test-result", statements.test_result_predicate(validation(gpu=gpu), "sha256:i", []))
        return dataclasses.replace(read_statement(stmt, "x").record, **change)

    verify.judge_result(result(), require_gpu=False, label="x")
    with pytest.raises(NotVerified, match="--require-gpu"):
        verify.judge_result(result(), require_gpu=True, label="x")
    verify.judge_result(result(gpu=True), require_gpu=True, label="x")
    with pytest.raises(NotVerified, match="not GPU checks"):
        verify.judge_result(result(warned=("smoke/versions",)), require_gpu=False, label="x")
    with pytest.raises(NotVerified, match="FAILED"):
        verify.judge_result(result(result="FAILED", failed=("smoke/compile",)), require_gpu=False, label="x")
    verify.judge_result(result(warned=("arm64/smoke/gpu", "amd64/ppo-gate/cuda")), False, "x")  # an index names them so
    with pytest.raises(NotVerified, match="lists no passed test"):
        verify.judge_result(result(gpu=True, passed=()), require_gpu=False, label="x")
    with pytest.raises(
        NotVerified, match="--require-gpu: the signed test result lists smoke/driver"
    ):  # the forged one-line proof
        verify.judge_result(result(gpu=True, passed=("smoke/versions",)), require_gpu=True, label="x")


def test_a_result_that_lists_no_check_is_failed_never_passed():
    assert statements.test_outcome({"ok": True, "gpu": True})["result"] == "FAILED"
    assert (
        statements.test_outcome({"ok": True, "gpu": True, "smoke": {"checks": []}, "ppo": {"device": "cuda"}})["result"]
        == "FAILED"
    )


def test_a_run_signed_ahead_of_this_hosts_clock_or_at_two_times_is_refused():
    now = dt.datetime(2026, 12, 6, 12, tzinfo=dt.UTC)
    verify.judge_age(verify.RunSet("r", now + dt.timedelta(minutes=4), {}), verify.Policy(now=now), "x")  # within the skew
    with pytest.raises(NotVerified, match="3650 days 0 min ahead of this host's clock"):
        verify.judge_age(verify.RunSet("r", now + dt.timedelta(days=3650), {}), verify.Policy(now=now), "x")
    split = [stmt_at("provenance", "A", "2026-01-01T00:00:00Z"), stmt_at("test-result", "A", "2026-01-01T00:00:01Z")]
    with pytest.raises(NotVerified, match="different signing times"):
        verify.deciding_run(split, ("provenance", "test-result"), "x")


def test_a_tag_the_provenance_does_not_name_and_another_line_are_refused():
    prov = Provenance("2.4-cu121", "linux/amd64", ("2.4-cu121",), (), "r", None, None)
    verify.judge_line(prov, parse_ref("h:5000/r:2.4-cu121"), verify.Policy(), "x")
    with pytest.raises(NotVerified, match="not one this image was pushed under"):
        verify.judge_line(prov, parse_ref("h:5000/r:2.9-cu128"), verify.Policy(), "x")
    with pytest.raises(NotVerified, match="not the 2.9-cu128 --expect-line asks for"):
        verify.judge_line(prov, parse_ref("h:5000/r@" + DIGEST), verify.Policy(expect_line="2.9-cu128"), "x")


def test_a_proof_past_max_age_is_refused():
    runset = verify.RunSet("r", dt.datetime(2026, 1, 1, tzinfo=dt.UTC), {})
    now = dt.datetime(2026, 3, 31, tzinfo=dt.UTC)  # 89 days later
    verify.judge_age(runset, verify.Policy(now=now), "x")
    with pytest.raises(NotVerified, match="proven 91 days ago .* past --max-age 90"):
        verify.judge_age(runset, verify.Policy(now=now + dt.timedelta(days=2)), "x")
    verify.judge_age(runset, verify.Policy(now=now + dt.timedelta(days=2), max_age_days=365), "x")


def test_an_accepted_advisory_past_its_expiry_is_caught():
    vulns = Vulns("2026-07-23", (("PYSEC-1", "2026-06-01"),))
    assert verify.lapsed(vulns, dt.date(2026, 12, 5)) == ["PYSEC-1 (accepted until 2026-06-01)"]
    assert verify.lapsed(vulns, dt.date(2026, 5, 1)) == []


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


def test_the_hygiene_scan_finds_a_signing_key_copied_into_an_image(tmp_path, keypair, encrypted):
    spec = importlib.util.spec_from_file_location("hygiene_scan", Path(attest.REPO_ROOT) / "container" / "hygiene_scan.py")
    scanner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scanner)
    for name, key in (("signing.key", keypair[0].path), ("encrypted.key", encrypted[0])):
        planted = tmp_path / "opt" / "app" / name
        planted.parent.mkdir(parents=True, exist_ok=True)
        planted.write_bytes(key.read_bytes())
        assert f"private key: /opt/app/{name}" in scanner.scan(str(tmp_path), [])


def test_build_py_list_says_whether_pushes_are_signed(monkeypatch, keypair):
    from pipeline.listing import signing_line

    source, _, keyid = keypair
    monkeypatch.delenv(attest.SIGN_KEY_ENV, raising=False)
    assert signing_line().startswith("signing: unsigned")
    monkeypatch.setenv(attest.SIGN_KEY_ENV, str(source.path))
    assert signing_line() == f"signing: pushes are signed with key {keyid[:16]}… (PROVEN_TORCH_SIGN_KEY, read by the signer)"


def test_a_signers_answer_with_bytes_outside_base64_is_refused_not_decoded_past_them():
    """`build.py attach` reads an answer file it is given: an envelope with stray bytes is not a signer's."""
    answer = {"keyid": "k", "run": "r", "signed_at": "2026-12-06T00:00:00Z"}
    assert attest.Signatures.read({**answer, "envelopes": ["e30="]}).envelopes == [b"{}"]
    with pytest.raises(ValueError):
        attest.Signatures.read({**answer, "envelopes": ["e30=!!"]})


def test_attach_refuses_an_answer_whose_envelopes_name_another_key_than_it_says(keypair, tmp_path):
    """`build.py attach` prints the answer's key: every envelope must name that key, or nothing is attached
    (refused before the registry is asked anything: the one given here does not exist)."""
    from pipeline import signing
    from tests.records import run_folder

    digest = "sha256:" + "a" * 64
    run_folder(tmp_path / "run", ref="h/r", digest=digest, image_id="sha256:" + "b" * 64)
    stmts = signing.image_statements(signable(tmp_path / "run"), Subject("h/r", digest))
    signing.write_prepared(tmp_path / "prepared", {"name": "h/r", "digest": digest}, stmts)
    signed = attest.sign(keypair[0], stmts)
    answer = {
        "run": signed.run,
        "signed_at": signed.signed_at,
        "envelopes": [base64.b64encode(e).decode() for e in signed.envelopes],
    }
    ref = parse_ref(f"127.0.0.1:9/r@{digest}")
    for keyid, said in ((signed.keyid, "cannot reach the registry"), ("f" * 64, "names key")):
        (tmp_path / "answer.json").write_text(json.dumps({**answer, "keyid": keyid}))
        with pytest.raises((NotVerified, PushFailed), match=said):
            signing.attach_command(ref, tmp_path / "prepared", tmp_path / "answer.json", 5)


def test_sign_names_only_the_stamped_immutable_tag_and_the_lines_moving_tags(matrix, tmp_path):
    """`build.py sign` puts facts.json's tags into the signed provenance, which `verify` accepts the image under:
    the immutable tag first, as the registry's config is stamped; then only the line's own moving tags, in
    their zstd and per-architecture forms too. Another line's tag, or `latest` on a line that does not move
    it, is refused."""
    from pipeline.records import Registered
    from pipeline.signing import check_tags
    from tests.records import run_folder

    line = next(v for v in matrix.variants if v.is_default)
    other = next(v for v in matrix.variants if not v.is_default)
    pushed = Registered("sha256:" + "a" * 64, "sha256:" + "b" * 64, None, "imm-20261206-0000000")  # run_folder's commit
    path = tmp_path / "facts.json"

    def facts(name: str, *tags: str) -> Facts:
        run_folder(tmp_path / name, ref="h/r", digest=pushed.digest, image_id=pushed.config, tags=tags, line=line.name)
        return Facts.load(tmp_path / name / "facts.json")

    whole = (pushed.version, f"{pushed.version}-zstd", *line.moving_tags, *(f"{t}-zstd" for t in line.moving_tags))
    check_tags(pushed, facts("whole", *whole), line, path)
    check_tags(pushed, facts("arch", f"{pushed.version}-amd64", f"{line.name}-amd64-zstd"), line, path)  # its platform's
    for tags, said in (
        ((pushed.version, other.name), f"names {other.name}, not tags of line {line.name}"),
        ((line.name, pushed.version), f"names {line.name} first"),
        (("imm-20261207-0000000",), "names imm-20261207-0000000 first"),
        ((f"{pushed.version}-arm64",), f"names {pushed.version}-arm64, not tags of line {line.name} on linux/amd64"),
    ):
        with pytest.raises(NotVerified, match=said):
            check_tags(pushed, facts("refused", *tags), line, path)
    with pytest.raises(NotVerified, match="names latest, not tags of line"):
        check_tags(pushed, facts("latest", pushed.version, "latest"), other, path)
    with pytest.raises(NotVerified, match="stamped with no version"):
        check_tags(Registered(pushed.digest, pushed.config, None), facts("unstamped", pushed.version), line, path)
    built_elsewhere = Registered(pushed.digest, pushed.config, None, "imm-20261206-abcdef0")
    with pytest.raises(NotVerified, match="names commit 000000000000, but .* is stamped imm-20261206-abcdef0, built at abcdef0"):
        check_tags(built_elsewhere, facts("commit", built_elsewhere.version), line, path)
