"""What the statements about an image say, made once (pipeline.signing) for a push, a later
`build.py sign` and cosign's predicates (`sign --prepare`): a later proof's record is the one Validation
makes, and a multi-arch index's test result is the worst of its children's, each test named by its
architecture. The registry side (`sign --prepare`, `sign --children`) is tests/image/test_signed_proof.py's."""

from __future__ import annotations

import pytest

from pipeline import statements
from pipeline.push import plain_tag
from pipeline.records import Facts
from pipeline.signing import index_statements
from pipeline.statements import PREDICATES, Subject
from pipeline.target import Validation
from tests import records

pytestmark = pytest.mark.unit

REPO = "ghcr.io/proven-torch/proven-torch"
DIGEST = "sha256:" + "a" * 64
IMAGE_ID = "sha256:" + "d" * 64


def test_a_later_proof_makes_the_record_validation_as_dict_makes():
    proof = {**records.proof_record(gpu=True), "ppo_cpu": None, "gpu_cpu_sps_ratio": 3.1}
    build = {**records.validation(gpu=False), "platform": "linux/amd64", "sbom": {"file": "sbom.cdx.json"}}
    made = statements.validation_with_proof(build, proof)
    want = Validation(
        ok=True, gpu=True, proof=proof, hygiene=(), size={}, sbom={}, audit={}, seconds=1.0, failures=(), stages=()
    ).as_dict()
    build_stages = ("seconds", "failures", "stages", "hygiene", "size", "sbom", "audit", "ran_in")  # ran_in: ran.json's
    from_proof = [k for k in want if k not in build_stages]  # a field Validation gains is compared too
    assert {k: made[k] for k in from_proof} == {k: want[k] for k in from_proof}
    assert made["audit"] == build["audit"]  # the build's own stages stay


def test_an_index_test_result_is_the_worst_of_its_children_each_test_named_by_architecture():
    about = [
        {"name": REPO, "digest": "sha256:" + "b" * 64, "platform": "linux/amd64", "validation": records.validation(gpu=True)},
        {"name": REPO, "digest": "sha256:" + "c" * 64, "platform": "linux/arm64", "validation": records.validation(gpu=False)},
    ]
    facts = Facts(
        command=(), commit="c", started="s", finished="f", invocation="i", tools={}, dependencies=(), line="2.11-cu130",
        flavor=None, platform="linux/amd64", ref=REPO, tags=("2.11-cu130-amd64",), stamped_image_id=IMAGE_ID,
    )  # fmt: skip
    signed = index_statements(Subject(REPO, DIGEST), facts, [plain_tag(t) for t in facts.tags], about)
    test = next(s["predicate"] for s in signed if s["predicateType"] == PREDICATES["test-result"])
    assert test["result"] == "WARNED" and "arm64/smoke/gpu" in test["warnedTests"] and "amd64/smoke/gpu" in test["passedTests"]
    provenance = next(s["predicate"] for s in signed if s["predicateType"] == PREDICATES["provenance"])
    assert provenance["buildDefinition"]["externalParameters"]["tags"] == ["2.11-cu130"]
    assert [c["uri"] for c in test["configuration"]] == [f"{REPO}@{c['digest']}" for c in about]


def test_a_per_architecture_tag_names_its_index_tag():
    assert plain_tag("2.11-cu130-arm64") == "2.11-cu130" and plain_tag("9.9.0-cu999-py3.0-20261206-abc1234-amd64").endswith(
        "abc1234"
    )
    assert plain_tag("2.9-cu128") == "2.9-cu128"


def test_the_signed_benchmarks_host_is_the_build_host_the_run_recorded_not_the_signers(tmp_path):
    """`build.py sign` may run on another machine (the release's prepare job): the benchmark's `host` is the one
    the build's run facts recorded (run_facts.gather), said "unknown" where they recorded none."""
    import json

    from pipeline.signing import image_statements

    digest = "sha256:" + "a" * 64
    records.run_folder(tmp_path, ref="h/r", digest=digest, image_id="sha256:" + "b" * 64)
    bench = next(
        s
        for s in image_statements(records.signable(tmp_path), Subject("h/r", digest))
        if s["predicateType"] == PREDICATES["benchmark"]
    )
    assert bench["predicate"]["host"] == {"machine": "unknown", "system": "unknown"}
    facts = json.loads((tmp_path / "facts.json").read_text())
    facts["tools"]["host"] = {"machine": "riscv64", "system": "Linux-on-the-build-host"}
    (tmp_path / "facts.json").write_text(json.dumps(facts))
    bench = next(
        s
        for s in image_statements(records.signable(tmp_path), Subject("h/r", digest))
        if s["predicateType"] == PREDICATES["benchmark"]
    )
    assert bench["predicate"]["host"] == {"machine": "riscv64", "system": "Linux-on-the-build-host"}
