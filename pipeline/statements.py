"""What a pushed image says about itself, as in-toto statements (v1): provenance, SBOM, test result,
benchmark, vulnerabilities and the VEX of accepted advisories, written from what the run knows (pure
functions; standard library only: the signer process imports it). Reading signed ones back is
pipeline/signed_statements.py's. The run and signing time in each subject are the signer's to stamp
(stamp_run), never the caller's (docs/supply-chain.md, "Runs and signed time"). The predicate types and
the fields `verify` and the cluster policies (deploy/) read are named here once: PREDICATES,
TEST_RESULT_FIELDS, GPU_TESTS.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

from common.rules import CHECK_NEEDS_GPU
from pipeline.records import Facts

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"  # the DSSE payloadType of an in-toto statement

PREDICATES = {
    "provenance": "https://slsa.dev/provenance/v1",
    "sbom": "https://cyclonedx.org/bom",
    "test-result": "https://in-toto.io/attestation/test-result/v0.1",
    "benchmark": "https://proven-torch.dev/attestation/ppo-benchmark/v1",
    "vulns": "https://in-toto.io/attestation/vulns/v0.1",
    "vex": "https://openvex.dev/ns/v0.2.0",
}
# An index (a multi-arch line's plain tags) is vouched for by its provenance and the children's
# combined test result; each child carries the whole set.
INDEX_KINDS = ("provenance", "test-result")
BUILD_TYPE = "https://proven-torch.dev/build/v1"  # SLSA buildType: build.py's run, docs/supply-chain.md

# The test-result predicate's fields the policies read (deploy/ and its test).
TEST_RESULT_FIELDS = ("result", "passedTests", "warnedTests", "failedTests", "configuration")
RESULTS = ("PASSED", "WARNED", "FAILED")
GATE_TEST = "ppo-gate"
# Tests that only a GPU runs: a CPU-only proof lists them as warned, never passed.
GPU_TESTS = tuple(f"smoke/{name}" for name, needs_gpu in CHECK_NEEDS_GPU.items() if needs_gpu) + (f"{GATE_TEST}/cuda",)


# In each statement's subject (an in-toto ResourceDescriptor's `annotations`), signed with it.
RUN_ANNOTATION = "proven-torch.dev/run"  # the run the statement belongs to: one build.py push or one release signing
SIGNED_ANNOTATION = "proven-torch.dev/signed-at"  # when it was signed, RFC 3339 UTC, by the signer's clock
RUN_NAME_ANNOTATION = "proven-torch.dev/run-name"  # the caller's name for the run (the Actions run URL): a label
STAMPED_ANNOTATION = "proven-torch.dev/stamped-by"  # who chose the run and time: always the signer
STAMPED_BY = "signer"
IMAGE_KINDS = tuple(PREDICATES)  # what a run signs about an image: all six
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime(TIME_FORMAT)


@dataclass(frozen=True)
class Subject:
    """What a statement is about: one pushed manifest. The run that signs it and when are the signer's to
    stamp (stamp_run), never the caller's."""

    name: str  # the repository, e.g. localhost:5000/proven-torch
    digest: str  # sha256:<hex> of the manifest as pushed

    def as_list(self) -> list[dict]:
        algo, _, hexdigest = self.digest.partition(":")
        return [{"name": self.name, "digest": {algo: hexdigest}, "annotations": {}}]


def stamp_run(stmt: dict, run: str, signed_at: str, run_name: str | None) -> dict:
    """The statement as the signer signs it: its subject annotated with the signer's own run id and clock
    (and the caller's run name, a label only); whatever the caller put there is replaced."""
    annotations = {RUN_ANNOTATION: run, SIGNED_ANNOTATION: signed_at, STAMPED_ANNOTATION: STAMPED_BY}
    if run_name:
        annotations[RUN_NAME_ANNOTATION] = run_name
    return {**stmt, "subject": [{**s, "annotations": dict(annotations)} for s in stmt.get("subject", [])]}


def statement(kind: str, subject: Subject, predicate: dict) -> dict:
    return {"_type": STATEMENT_TYPE, "subject": subject.as_list(), "predicateType": PREDICATES[kind], "predicate": predicate}


def encode(stmt: dict) -> bytes:
    """Canonical JSON bytes (sorted keys, no spaces): the signed payloads, the envelopes and the artifacts pushed."""
    return json.dumps(stmt, sort_keys=True, separators=(",", ":")).encode()


def kind_of(predicate_type: str) -> str | None:
    return next((k for k, v in PREDICATES.items() if v == predicate_type), None)


# --------------------------------------------------------------------------- test result


def test_outcome(validation: dict, flavor: str | None = None) -> dict:
    """(result, passed, warned, failed, reasons) of a validation record (Validation.as_dict()): every smoke check
    (smoke/<check>), the PPO gate (ppo-gate/<device>), a flavor's own gate. A GPU check that did not run is
    warned, with its reason (docs/supply-chain.md, "WARNED is a CPU-only proof"); validation that failed, never
    pushed, is said as FAILED all the same."""
    passed, warned, failed = [], [], []
    reasons: dict[str, str] = {}
    checks = (validation.get("smoke") or {}).get("checks") or []
    if not checks:  # a result that lists no test passed nothing
        failed.append("smoke/(no checks listed)")
    for check in checks:
        name = f"smoke/{check['name']}"
        if check["status"] == "pass":
            passed.append(name)
        elif check["status"] == "skip" and name in GPU_TESTS:
            warned.append(name)
            reasons[name] = check.get("detail", "")
        else:
            failed.append(name)
    ppo = validation.get("ppo") or {}
    device = "cuda" if str(ppo.get("device", "cpu")).startswith("cuda") else "cpu"
    if validation.get("ok") and ppo:
        passed.append(f"{GATE_TEST}/{device}")
        if device == "cpu":
            warned.append(f"{GATE_TEST}/cuda")
            reasons[f"{GATE_TEST}/cuda"] = "no GPU visible: the gate trained on the CPU"
    elif ppo or not validation.get("ok"):
        failed.append(f"{GATE_TEST}/{device}")
    if flavor and (validation.get("proof") or {}).get(flavor) is not None:  # a flavor's own gate (smoke/proof.py)
        (passed if validation.get("ok") else failed).append(f"{flavor}-gate")
    if validation.get("emulated"):
        reasons["emulation"] = validation.get("validated_on", "validated under emulation")
    result = "FAILED" if failed or not validation.get("ok") else ("WARNED" if warned else "PASSED")
    return {"result": result, "passed": passed, "warned": warned, "failed": failed, "reasons": reasons}


def validated_on(platform: str, gpu: bool, emulated: bool) -> str:
    """What a validation ran on, in the words the report, the labels, the statements and the README use."""
    if emulated:
        return f"{platform}: validated under emulation on amd64; not run on Arm hardware or on a GPU"
    return f"{platform}: " + ("validated on a GPU" if gpu else "validated on the CPU only; not run on a GPU")


# The parts of a proof record (proof.json) that Validation.as_dict lifts to the top of the validation
# record (pipeline/target.py); the rest of it goes under "proof".
LIFTED = ("smoke", "ppo", "ppo_cpu")


def validation_with_proof(validation: dict, proof: dict) -> dict:
    """The build's validation record with a later proof's outcome in place of its own: the shape
    Validation(proof=...).as_dict() gives, the build's other stages (hygiene, audit, size) kept."""
    emulated = bool((proof.get("where") or {}).get("emulation"))
    gpu = bool(proof.get("gpu"))
    return {
        **validation,
        "ok": proof.get("ok") is True,
        "gpu": gpu,
        "emulated": emulated,
        "validated_on": validated_on(validation.get("platform", "linux/amd64"), gpu, emulated),
        "failures": list(proof.get("failures") or []),
        **proof_parts(proof),
    }


def proof_parts(proof: dict) -> dict:
    """What a validation record says of its proof: the verdict, the parts LIFTED to its top, the rest under "proof"."""
    return {
        "verdict": proof.get("verdict"),
        "smoke": proof.get("smoke") or {},
        "ppo": proof.get("ppo") or {},
        "ppo_cpu": proof.get("ppo_cpu"),
        "gpu_cpu_sps_ratio": proof.get("gpu_cpu_sps_ratio"),
        "proof": {k: v for k, v in proof.items() if k not in LIFTED},
    }


def test_result_predicate(validation: dict, image_id: str, configuration: list[dict], flavor: str | None = None) -> dict:
    """The in-toto test-result predicate (v0.1) with the reasons for each warned test beside it."""
    outcome = test_outcome(validation, flavor)
    return {
        "result": outcome["result"],
        "configuration": configuration,
        "passedTests": outcome["passed"],
        "warnedTests": outcome["warned"],
        "failedTests": outcome["failed"],
        # Not in the v0.1 fields, which the spec lets a producer add to: why each warned test
        # warned, where the proof ran, and the image ID (config digest) the checks ran in.
        "warnedReasons": outcome["reasons"],
        "validatedOn": validation.get("validated_on"),
        "imageId": image_id,
        "verdict": validation.get("verdict"),
    }


def index_test_result(ref: str, children: list[dict], flavor: str | None = None) -> dict:
    """The test-result predicate of a multi-arch index: its children's ({platform, digest, validation})
    results combined, the worst winning, each test named by its architecture ("arm64/smoke/gpu")."""
    outcomes = {c["platform"]: test_outcome(c["validation"], flavor) for c in children}
    arch = {c["platform"]: c["platform"].rsplit("/", 1)[-1] for c in children}
    return {
        "result": combined_result([o["result"] for o in outcomes.values()]),
        "configuration": [
            {"name": c["platform"], "uri": f"{ref}@{c['digest']}", "digest": {"sha256": c["digest"].removeprefix("sha256:")}}
            for c in children
        ],
        **{
            field: [f"{arch[p]}/{t}" for p, o in outcomes.items() for t in o[key]]
            for field, key in (("passedTests", "passed"), ("warnedTests", "warned"), ("failedTests", "failed"))
        },
        "warnedReasons": {f"{arch[p]}/{t}": why for p, o in outcomes.items() for t, why in o["reasons"].items()},
        "validatedOn": "; ".join(c["validation"].get("validated_on", "") for c in children),
        "imageId": None,
    }


def combined_result(results: list[str]) -> str:
    """An index's result: the worst of its children's."""
    return max(results, key=lambda r: RESULTS.index(r) if r in RESULTS else len(RESULTS), default="FAILED")


# --------------------------------------------------------------------------- the others


def benchmark_predicate(validation: dict, host: dict) -> dict:
    """The PPO gate's figures (the schema: pipeline/schemas/ppo-benchmark-v1.schema.json)."""
    ppo = validation.get("ppo") or {}
    where = (validation.get("proof") or {}).get("where") or {}
    gate = (validation.get("proof") or {}).get("ppo_gate") or {}
    return {
        "benchmark": "ppo-gate",
        "environment": gate.get("env_id") or ppo.get("env_id"),
        "target_return": gate.get("target_return"),
        "budget_steps": gate.get("total_timesteps"),
        "device": str(ppo.get("device", "cpu")),
        "steps_to_target": ppo.get("steps_to_target"),
        "seconds_to_target": ppo.get("seconds_to_target"),
        "steps_per_second": ppo.get("sps_end_to_end"),
        "gpu_model": ppo.get("gpu_name") or (", ".join(where.get("gpu_names") or []) or None),
        "driver": where.get("driver"),
        "cuda": ((validation.get("smoke") or {}).get("facts") or {}).get("cuda"),
        "host_cpu": where.get("cpu"),
        "host": host,
        "gpu_cpu_sps_ratio": validation.get("gpu_cpu_sps_ratio"),
    }


def vulns_predicate(audit: dict, scanner_version: str) -> dict:
    """The in-toto vulns predicate (v0.1): every finding, accepted ones marked, the data's date."""

    def result(finding: dict, accepted: bool) -> dict:
        return {
            "id": finding["id"],
            "severity": [{"method": "proven-torch", "score": finding["severity"]}],
            "annotations": [
                {"package": f"pkg:pypi/{finding['package']}@{finding['version']}"},
                {"fixed": str(finding.get("fixed"))},
                *([{"accepted": finding.get("reason", "")}, {"expires": finding.get("expires", "")}] if accepted else []),
            ],
        }

    return {
        "scanner": {
            "uri": "https://github.com/proven-torch/proven-torch/blob/main/pipeline/validation/audit.py",
            "version": scanner_version,
            "db": {
                "uri": audit.get("source") or "images/advisories/",
                "version": str(audit.get("as_of")),
                "lastUpdate": audit.get("as_of"),
            },
            "result": [result(f, True) for f in audit.get("allowed", [])] + [result(f, False) for f in audit.get("findings", [])],
        },
        "metadata": {"scanStartedOn": audit.get("scanned_at"), "scanFinishedOn": audit.get("scanned_at")},
    }


def vex_predicate(audit: dict, image_ref: str, author: str, timestamp: str) -> dict:
    """An OpenVEX document: one statement per accepted finding. The line ships the affected version on
    purpose, so the status is "affected" and the action statement says why, until when, which release fixes it."""
    return {
        "@context": "https://openvex.dev/ns/v0.2.0",
        "@id": f"https://proven-torch.dev/vex/{image_ref}",
        "author": author,
        "timestamp": timestamp,
        "version": 1,
        "statements": [
            {
                "vulnerability": {"name": f["id"], "aliases": f.get("aliases", [])},
                "products": [{"@id": image_ref, "subcomponents": [{"@id": f"pkg:pypi/{f['package']}@{f['version']}"}]}],
                "status": "affected",
                "action_statement": f"accepted until {f['expires']}: {f['reason']} (fixed in: {f.get('fixed')})",
                "action_statement_timestamp": timestamp,
            }
            for f in audit.get("allowed", [])
        ],
    }


def provenance_predicate(facts: Facts, platform: str, tags: list[str], dependencies: list[dict], source: str) -> dict:
    """SLSA provenance v1: who built it (build.py of the `source` repository at the run's revision), how, from
    what, for which line and which tags (verify checks a tag it is asked about against them)."""
    builder_id = f"{source}/blob/{facts.commit.removesuffix('-dirty')}/build.py"
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {"command": list(facts.command), "line": facts.line, "platform": platform, "tags": tags},
            "internalParameters": {"tools": facts.tools},
            "resolvedDependencies": dependencies,
        },
        "runDetails": {
            "builder": {"id": builder_id, "version": {"build.py": facts.commit}},
            "metadata": {"invocationId": facts.invocation, "startedOn": facts.started, "finishedOn": facts.finished},
        },
    }
