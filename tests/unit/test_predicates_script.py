"""scripts/predicates-from-report.py: a multi-arch index's test result for cosign is the one build.py signs
(pipeline.image_statements.index_statements), and a later proof's record is the one Validation makes.
An image's own predicates are `build.py sign --prepare DIR`'s, checked as signing checks them
(tests/image/test_signed_proof.py)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from pipeline import statements
from pipeline.image_statements import index_statements
from pipeline.records import Facts
from pipeline.statements import PREDICATES, Subject
from pipeline.validation.gate import Validation
from pipeline.variants import REPO_ROOT
from tests import records

pytestmark = pytest.mark.unit

SCRIPT = REPO_ROOT / "scripts" / "predicates-from-report.py"
REPO = "ghcr.io/proven-torch/proven-torch"
DIGEST = "sha256:" + "a" * 64
IMAGE_ID = "sha256:" + "d" * 64
TIMES = ("timestamp", "action_statement_timestamp")  # the VEX document says when it was made: they differ by the second


def script():
    spec = importlib.util.spec_from_file_location("predicates_from_report", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read(out, name: str) -> dict:
    return json.loads((out / name).read_text())


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


def test_an_index_test_result_is_the_one_build_py_signs(tmp_path):
    children = [("linux/amd64", "b", True), ("linux/arm64", "c", False)]
    folders, about = [], []
    for platform, letter, gpu in children:
        folder = tmp_path / platform.replace("/", "-")
        folder.mkdir()
        subject = {"name": REPO, "digest": "sha256:" + letter * 64, "variant": "2.11-cu130", "platform": platform, "flavor": None}
        (folder / "subject.json").write_text(json.dumps(subject))
        (folder / "validation.json").write_text(json.dumps(records.validation(gpu=gpu)))
        folders.append(str(folder))
        about.append({**subject, "validation": records.validation(gpu=gpu)})
    out = tmp_path / "index"
    assert script().main(["index", str(out), "--ref", REPO, "--digest", DIGEST, *folders]) == 0
    facts = Facts(
        command=(), commit="c", started="s", finished="f", invocation="i", tools={}, dependencies=(), line="2.11-cu130",
        flavor=None, platform="linux/amd64", ref=REPO, tags=("2.11-cu130",), stamped_image_id=IMAGE_ID,
    )  # fmt: skip
    signed = index_statements(Subject(REPO, DIGEST), facts, ["2.11-cu130"], about)
    want = next(s["predicate"] for s in signed if s["predicateType"] == PREDICATES["test-result"])
    assert read(out, "test-result.json") == want and want["result"] == "WARNED" and "arm64/smoke/gpu" in want["warnedTests"]
    assert (out / "predicates.tsv").read_text() == f"{PREDICATES['test-result']}\ttest-result.json\n"
