"""scripts/predicates-from-report.py: the predicates the release attaches with cosign are the ones
build.py signs (pipeline.publish.image_statements, one function), from a build's report folder,
with a later GPU proof in place of the build's CPU one, and an index's combined test result."""

from __future__ import annotations

import importlib.util
import json

import jsonschema
import pytest

from pipeline import publish, statements
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


def untimed(value):
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if k not in TIMES}
    return [untimed(v) for v in value] if isinstance(value, list) else value


@pytest.fixture
def pushed_build(tmp_path):
    """A CPU-only pushed build's report folder (the release's hosted runner), as build.py leaves it."""
    return records.run_folder(
        tmp_path / "run", ref=REPO, digest=DIGEST, image_id=IMAGE_ID, tags=("2.9-cu128-20260801", "2.9-cu128")
    )


def read(out, name: str) -> dict:
    return json.loads((out / name).read_text())


def test_a_pushed_build_gives_the_six_predicates_build_py_signs(pushed_build, tmp_path):
    out = tmp_path / "predicates"
    assert script().main(["image", str(pushed_build), str(out)]) == 0
    listed = dict(line.split("\t") for line in (out / "predicates.tsv").read_text().splitlines())
    assert listed == {uri: f"{kind}.json" for kind, uri in PREDICATES.items()}
    signed = publish.image_statements(pushed_build.parent, Subject(REPO, DIGEST, run="r"))
    for stmt in signed:
        kind = statements.kind_of(stmt["predicateType"])
        assert untimed(read(out, f"{kind}.json")) == untimed(stmt["predicate"]), kind
    test = read(out, "test-result.json")
    assert test["result"] == "WARNED" and test["configuration"][0]["uri"] == f"{REPO}@{DIGEST}"  # the hosted build: CPU only
    assert read(out, "provenance.json")["buildDefinition"]["externalParameters"]["tags"] == ["2.9-cu128-20260801", "2.9-cu128"]
    assert read(out, "subject.json")["digest"] == DIGEST


def test_a_gpu_proof_replaces_the_test_result_and_benchmark_and_nothing_else(pushed_build, tmp_path):
    before, after = tmp_path / "before", tmp_path / "after"
    assert script().main(["image", str(pushed_build), str(before)]) == 0
    proof = tmp_path / "proof.json"
    proof.write_text(json.dumps(records.proof_record(gpu=True)))
    assert script().main(["image", str(pushed_build), str(after), "--proof", str(proof)]) == 0
    test = read(after, "test-result.json")
    assert test["result"] == "PASSED" and test["warnedTests"] == [] and "ppo-gate/cuda" in test["passedTests"]
    assert test["validatedOn"] == "linux/amd64: validated on a GPU"
    assert (test["imageId"], test["configuration"]) == (
        read(before, "test-result.json")["imageId"],
        read(before, "test-result.json")["configuration"],
    )
    bench = read(after, "benchmark.json")
    jsonschema.validate(bench, json.loads(statements.BENCHMARK_SCHEMA.read_text()))
    assert bench["device"] == "cuda:0" and bench["gpu_model"] == "NVIDIA H200"
    for name in ("provenance.json", "sbom.json", "vulns.json", "vex.json", "subject.json", "predicates.tsv"):
        assert untimed(
            json.loads((after / name).read_text()) if name.endswith(".json") else (after / name).read_text()
        ) == untimed(json.loads((before / name).read_text()) if name.endswith(".json") else (before / name).read_text()), name


def test_a_failed_proof_gives_no_predicates(pushed_build, tmp_path, capsys):
    proof = tmp_path / "proof.json"
    proof.write_text(json.dumps(records.proof_record(ok=False)))
    assert script().main(["image", str(pushed_build), str(tmp_path / "out"), "--proof", str(proof)]) == 1
    assert "the proof did not pass" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_a_later_proof_makes_the_record_validation_as_dict_makes():
    proof = {**records.proof_record(gpu=True), "ppo_cpu": None, "gpu_cpu_sps_ratio": 3.1}
    build = {**records.validation(gpu=False), "platform": "linux/amd64", "sbom": {"file": "sbom.cdx.json"}}
    made = statements.validation_with_proof(build, proof)
    want = Validation(
        ok=True, gpu=True, proof=proof, hygiene=(), size={}, sbom={}, audit={}, seconds=1.0, failures=(), stages=()
    ).as_dict()
    build_stages = ("seconds", "failures", "stages", "hygiene", "size", "sbom", "audit")
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
    facts = {
        "line": "2.11-cu130",
        "flavor": None,
        "command": [],
        "commit": "c",
        "tools": {},
        "invocation": "i",
        "started": "s",
        "finished": "f",
    }
    signed = publish.index_statements(Subject(REPO, DIGEST, run="r"), facts, ["2.11-cu130"], about)
    want = next(s["predicate"] for s in signed if s["predicateType"] == PREDICATES["test-result"])
    assert read(out, "test-result.json") == want and want["result"] == "WARNED" and "arm64/smoke/gpu" in want["warnedTests"]
    assert (out / "predicates.tsv").read_text() == f"{PREDICATES['test-result']}\ttest-result.json\n"


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"status": "validated"}, "status 'validated', not 'pushed'"),
        ({"pushed": {f"{REPO}:a": DIGEST, f"{REPO}:b": "sha256:" + "e" * 64}}, "2 pushed digests"),
    ],
    ids=["not-pushed", "two-digests"],
)
def test_a_report_that_cannot_be_attested_is_one_line(pushed_build, tmp_path, capsys, change, said):
    pushed_build.write_text(json.dumps({**json.loads(pushed_build.read_text()), **change}))
    assert script().main(["image", str(pushed_build), str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("predicates-from-report: ") and said in err and err.count("\n") == 1
