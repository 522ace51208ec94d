"""The deploy manifests validate offline, strictly: the core kinds against a current Kubernetes
release's schemas (kubernetes-validate --strict), the Kubeflow TrainJob against the CRD schema of
the Trainer release it targets (deploy/kubeflow/trainjob.schema.json), checked as the API server
checks a custom resource on create. The admission policies (deploy/policy/) name only what
pipeline/statements.py names, and the predicates the release attaches with cosign
(scripts/predicates-from-report.py) are the ones pipeline.attest signs."""

from __future__ import annotations

import copy
import fnmatch
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from pipeline import statements
from pipeline.build_image import SOURCE
from pipeline.statements import GPU_TESTS, PREDICATES, TEST_RESULT_FIELDS
from pipeline.variants import REPO_ROOT
from tests import records

pytestmark = pytest.mark.unit

MANIFESTS = sorted((REPO_ROOT / "deploy" / "kubernetes").glob("*.yaml"))
TRAINJOB = ("trainer.kubeflow.org/v1alpha1", "TrainJob")
TRAINJOB_SCHEMA = REPO_ROOT / "deploy" / "kubeflow" / "trainjob.schema.json"


def documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def kinds(path: Path) -> set[tuple[str, str]]:
    return {(doc["apiVersion"], doc["kind"]) for doc in documents(path)}


CORE = [p for p in MANIFESTS if TRAINJOB not in kinds(p)]
TRAINJOBS = [p for p in MANIFESTS if TRAINJOB in kinds(p)]


def test_each_manifest_is_checked_by_one_validator():
    """kubernetes-validate knows the core kinds only; a file mixing in a TrainJob would escape both checks."""
    assert TRAINJOBS, "no TrainJob manifest found"
    for path in TRAINJOBS:
        assert kinds(path) == {TRAINJOB}, f"{path.name}: keep the TrainJob in a file of its own"


# --- core kinds: kubernetes-validate ------------------------------------------


def validate(*paths: Path) -> subprocess.CompletedProcess:
    tool = shutil.which("kubernetes-validate") or str(Path(sys.executable).parent / "kubernetes-validate")
    if not Path(tool).exists():
        pytest.fail("kubernetes-validate not installed: `pip install -r requirements-dev.txt` brings it")
    return subprocess.run([tool, "--strict", *map(str, paths)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("path", CORE, ids=[p.name for p in CORE])
def test_manifest_validates_strictly(path):
    done = validate(path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_unknown_field_fails_the_validation(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (REPO_ROOT / "deploy" / "kubernetes" / "workspace.yaml")
        .read_text()
        .replace("readOnlyRootFilesystem", "readOnlyRootFileSystem")
    )
    assert validate(bad).returncode != 0


# --- the TrainJob: its CRD's schema, as the API server applies it ---------------
#
# kubectl apply asks for strict field validation by default: a field the schema does not
# declare is an error, not silently pruned. jsonschema alone would let it through (the CRD
# schema leaves additionalProperties unset), so the walk below reports every such field.
# CEL rules (x-kubernetes-validations) cannot run here: each one that applies on create
# (no oldSelf; transition rules run on update only) needs its Python equivalent below, and
# a rule without one fails the test rather than passing unchecked.

CEL_ON_CREATE = {
    "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')": lambda obj: bool(
        re.search(r"^[a-z]([-a-z0-9]*[a-z0-9])?$", obj["metadata"]["name"])
    ),
    "size(self.metadata.name) <= 63": lambda obj: len(obj["metadata"]["name"]) <= 63,
}


def trainjob_schema() -> dict:
    return json.loads(TRAINJOB_SCHEMA.read_text())


def dotted(parts) -> str:
    """spec.trainer.env[0].name; "(root)" for the document itself."""
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).lstrip(".")
    return text or "(root)"


def walk(value, schema: dict, parts: tuple = ()):
    """Every node of the manifest with the schema node that governs it (declared fields only)."""
    yield parts, value, schema
    if isinstance(value, dict):
        declared, rest = schema.get("properties", {}), schema.get("additionalProperties")
        for key, item in value.items():
            if key in declared:
                yield from walk(item, declared[key], (*parts, key))
            elif isinstance(rest, dict):
                yield from walk(item, rest, (*parts, key))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            yield from walk(item, schema["items"], (*parts, index))


def undeclared(value: dict, schema: dict) -> list[str]:
    if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("additionalProperties") not in (None, False):
        return []
    return [key for key in value if key not in schema.get("properties", {})]


def list_key(item, schema: dict):
    keys = schema.get("x-kubernetes-list-map-keys")
    return tuple(item.get(k) for k in keys) if keys else json.dumps(item, sort_keys=True)


def trainjob_problems(doc: dict, schema: dict) -> list[str]:
    problems = [f"{dotted(e.absolute_path)}: {e.message}" for e in jsonschema.Draft4Validator(schema).iter_errors(doc)]
    # The root metadata is an ObjectMeta, which the API server checks against its own schema.
    meta = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc.get("metadata")}
    try:
        kubernetes_validate.validate(meta, kubernetes_validate.latest_version(), strict=True)
    except kubernetes_validate.ValidationError as err:
        problems.append(f"metadata: {err.message}")
    body = {key: value for key, value in doc.items() if key != "metadata"}
    for parts, value, node in walk(body, schema):
        where = dotted(parts)
        if isinstance(value, dict):
            problems += [f"{dotted((*parts, key))}: field not declared by the schema" for key in undeclared(value, node)]
        if isinstance(value, list) and node.get("x-kubernetes-list-type") in ("map", "set"):
            seen = [list_key(item, node) for item in value]
            problems += [f"{where}: duplicate entry {key}" for key in {k for k in seen if seen.count(k) > 1}]
        for rule in (r["rule"] for r in node.get("x-kubernetes-validations", []) if "oldSelf" not in r["rule"]):
            check = CEL_ON_CREATE.get(rule)
            if check is None:
                problems.append(f"{where}: CEL rule {rule!r} has no Python equivalent in this test")
            elif not check(doc if not parts else value):
                problems.append(f"{where}: fails {rule!r}")
    return problems


def test_the_vendored_schema_names_its_source():
    source = trainjob_schema()["x-vendored"]
    assert source["repository"] == "https://github.com/kubeflow/trainer"
    assert source["path"] == "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml"
    assert re.fullmatch(r"[0-9a-f]{40}", source["commit"]) and source["license"].startswith("Apache-2.0")
    assert (TRAINJOB_SCHEMA.parent / "LICENSE").read_text().lstrip().startswith("Apache License")


@pytest.mark.parametrize("path", TRAINJOBS, ids=[p.name for p in TRAINJOBS])
def test_trainjob_validates_against_its_crd_schema(path):
    schema = trainjob_schema()
    assert f"Kubeflow Trainer {schema['x-vendored']['tag']}" in path.read_text(), "the comment names another release"
    for doc in documents(path):
        assert trainjob_problems(doc, schema) == []


@pytest.mark.parametrize(
    ("good", "bad", "named"),
    [
        ("numProcPerNode: 1", "numProcsPerNode: 1", "spec.trainer.numProcsPerNode: field not declared"),
        ("readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true", ".readOnlyRootFileSystem: field not declared"),
        ("numNodes: 2", "numNodes: two", "spec.trainer.numNodes: 'two' is not of type 'integer'"),
        ("name: proven-torch-ppo", "name: Proven-Torch-PPO", '(root): fails "self.metadata.name.matches'),
        (
            "manager: proven-torch.io/restricted-profile",
            "managr: proven-torch.io/restricted-profile",
            "spec.runtimePatches[0]: 'manager' is a required",
        ),
        (
            "- {name: NCCL_DEBUG, value: WARN}",
            "- {name: NCCL_DEBUG, value: WARN}\n      - {name: NCCL_DEBUG, value: INFO}",
            "spec.trainer.env: duplicate entry ('NCCL_DEBUG',)",
        ),
    ],
    ids=["misspelled-field", "misspelled-core-field", "wrong-type", "cel-name-rule", "missing-required", "duplicate-env"],
)
def test_a_broken_trainjob_fails_with_the_field_named(good, bad, named):
    (path,) = TRAINJOBS
    text = path.read_text()
    assert text.count(good) == 1, good
    (doc,) = yaml.safe_load_all(text.replace(good, bad))
    problems = trainjob_problems(doc, trainjob_schema())
    assert any(named in p for p in problems), problems


def test_an_unmapped_cel_rule_fails_rather_than_passing():
    schema = copy.deepcopy(trainjob_schema())
    schema["properties"]["spec"]["x-kubernetes-validations"] = [{"rule": "has(self.trainer)"}]
    (doc,) = documents(TRAINJOBS[0])
    assert any("has no Python equivalent" in p for p in trainjob_problems(doc, schema))


# --- every pod runs under the restricted profile --------------------------------


def pod_specs(doc: dict) -> list[tuple[str, dict]]:
    """(where, pod spec) of a document. A TrainJob's pods come from its runtime; what it sets on
    them is its runtimePatches for the replicated job "node", whose container "node" is the only
    one the torch-distributed runtime defines."""
    if doc["kind"] in ("Deployment", "Job"):
        return [(f"{doc['kind']}/{doc['metadata']['name']}", doc["spec"]["template"]["spec"])]
    if doc["kind"] == "TrainJob":
        found = []
        for patch in doc["spec"].get("runtimePatches", []):
            for job in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
                found.append((f"runtimePatches[{patch['manager']}]/{job['name']}", job["template"]["spec"]["template"]["spec"]))
        assert [where.rsplit("/", 1)[1] for where, _ in found] == ["node"], found
        assert [c["name"] for c in found[0][1]["containers"]] == ["node"]
        return found
    return []


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_every_container_runs_restricted(path):
    specs = [found for doc in documents(path) for found in pod_specs(doc)]
    assert specs, f"{path.name}: no pod spec found"
    for where, spec in specs:
        pod = spec.get("securityContext", {})
        assert pod.get("runAsNonRoot") is True, where
        assert pod.get("seccompProfile", {}).get("type") == "RuntimeDefault", where
        for container in spec.get("initContainers", []) + spec["containers"]:
            context = container.get("securityContext", {})
            assert context.get("allowPrivilegeEscalation") is False, (where, container["name"])
            assert context.get("readOnlyRootFilesystem") is True, (where, container["name"])
            assert context.get("capabilities", {}).get("drop") == ["ALL"], (where, container["name"])


# --- admission policies (deploy/policy/): one source of names ------------------
#
# Neither Kyverno's nor policy-controller's CRD schema is vendored here and neither ran against a
# cluster: the checks are structural (the keys the policies rely on) and, above all, about names.
# The predicate type, the test-result fields and the GPU test names a policy reads must be the ones
# pipeline/statements.py names (PREDICATES, TEST_RESULT_FIELDS, GPU_TESTS); the names are found in
# the policy's own text, so a rename on either side fails here.

POLICY_DIR = REPO_ROOT / "deploy" / "policy"
KYVERNO = POLICY_DIR / "kyverno-require-proven.yaml"
POLICY_CONTROLLER = POLICY_DIR / "policy-controller-require-proven.yaml"
POLICIES = [KYVERNO, POLICY_CONTROLLER]
TEST_RESULT = PREDICATES["test-result"]
GITHUB_OIDC = "https://token.actions.githubusercontent.com"


def named_predicate_types(text: str) -> set[str]:
    """Every URI in the text that is a predicate type of the pipeline or looks like an in-toto one."""
    uris = set(re.findall(r"https://[^\s\"'`,)\]}]+", text))
    return {u for u in uris if u in PREDICATES.values() or "/attestation/" in u}


def named_gpu_tests(text: str) -> set[str]:
    """Every test name in the text with the prefix of a GPU test (smoke/..., ppo-gate/...), alone or as
    a wildcard over the architecture (*/smoke/gpu); an index's example name (arm64/smoke/gpu) is not one."""
    prefixes = "|".join(sorted(re.escape(t.split("/")[0]) for t in GPU_TESTS))
    return set(re.findall(rf"(?<![\w/*-])(?:\*/)?((?:{prefixes})/[\w.-]+)", text))


def kyverno_attestations(doc: dict):
    """(rule, verifyImages entry, attestation) of a ClusterPolicy."""
    for rule in doc["spec"]["rules"]:
        for entry in rule.get("verifyImages", []):
            for attestation in entry.get("attestations", []):
                yield rule, entry, attestation


def strings(value) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


def asked_for(doc: dict) -> list[tuple[str, str, str]]:
    """(where, predicate type asked for, test-result field read) of a policy document; '' where none."""
    found = []
    if doc["kind"] == "ClusterPolicy":
        for rule, _entry, attestation in kyverno_attestations(doc):
            where = f"rules[{rule['name']}]"
            found.append((where, attestation.get("type") or attestation.get("predicateType", ""), ""))
            for text in strings(attestation.get("conditions", [])):
                found += [(where, "", field) for field in re.findall(r"{{\s*([A-Za-z_]\w*)", text)]
    else:
        for authority in doc["spec"]["authorities"]:
            for attestation in authority.get("attestations", []):
                where = f"authorities[{authority['name']}]"
                rego = attestation["policy"]["data"]
                found.append((where, attestation["predicateType"], ""))
                found += [(where, t, "") for t in re.findall(r'input\.predicateType\s*==\s*"([^"]+)"', rego)]
                found += [(where, "", field) for field in re.findall(r"input\.predicate\.(\w+)", rego)]
    return found


def policy_problems(text: str) -> list[str]:
    """What in a policy's text names something pipeline/statements.py does not (or no longer) name."""
    problems = []
    if (named := named_predicate_types(text)) != {TEST_RESULT}:
        problems.append(f"predicate types named: {sorted(named)}; want only {TEST_RESULT}")
    for doc in (d for d in yaml.safe_load_all(text) if d):
        for where, predicate_type, field in asked_for(doc):
            if predicate_type and predicate_type != TEST_RESULT:
                problems.append(f"{where}: asks for predicate type {predicate_type}, not {TEST_RESULT}")
            if field and field not in TEST_RESULT_FIELDS:
                problems.append(f"{where}: reads {field!r}, not one of TEST_RESULT_FIELDS {TEST_RESULT_FIELDS}")
    if (tests := named_gpu_tests(text)) != set(GPU_TESTS):
        problems.append(f"GPU tests named: {sorted(tests)}; pipeline.statements.GPU_TESTS: {sorted(GPU_TESTS)}")
    return problems


def test_the_policy_folder_holds_one_policy_per_admission_controller():
    assert sorted(POLICY_DIR.glob("*")) == POLICIES
    assert kinds(KYVERNO) == {("kyverno.io/v1", "ClusterPolicy")}
    assert kinds(POLICY_CONTROLLER) == {("policy.sigstore.dev/v1beta1", "ClusterImagePolicy")}


@pytest.mark.parametrize("path", POLICIES, ids=[p.name for p in POLICIES])
def test_a_policy_names_only_what_pipeline_statements_names(path):
    assert policy_problems(path.read_text()) == []
    assert {f for _, _, f in asked_for(documents(path)[0])} - {""} >= {"result", "warnedTests"}


@pytest.mark.parametrize(
    ("path", "good", "bad", "named"),
    [
        (KYVERNO, TEST_RESULT, TEST_RESULT.replace("v0.1", "v0.2"), "test-result/v0.2"),
        (POLICY_CONTROLLER, TEST_RESULT, TEST_RESULT.replace("v0.1", "v0.2"), "test-result/v0.2"),
        (KYVERNO, "smoke/gpu", "smoke/cuda", "smoke/cuda"),
        (POLICY_CONTROLLER, '"smoke/gpu"', '"smoke/cuda"', "smoke/cuda"),
        (KYVERNO, "- ppo-gate/cuda", "- ppo-gate/gpu", "ppo-gate/gpu"),
        (KYVERNO, "{{ warnedTests }}", "{{ warnedTest }}", "reads 'warnedTest'"),
        (POLICY_CONTROLLER, "input.predicate.result", "input.predicate.status", "reads 'status'"),
        (POLICY_CONTROLLER, "predicateType: https", "predicateType: cyclonedx # https", "asks for predicate type cyclonedx"),
    ],
    ids=["kyverno-type", "pc-type", "kyverno-gpu", "pc-gpu", "kyverno-gate", "kyverno-field", "pc-field", "pc-short-type"],
)
def test_a_name_that_drifts_from_pipeline_statements_fails(path, good, bad, named):
    text = path.read_text()
    assert good in text, good
    problems = policy_problems(text.replace(good, bad))
    assert any(named in p for p in problems), problems


def test_a_gpu_test_added_to_the_pipeline_but_not_to_the_policies_fails(monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "GPU_TESTS", (*GPU_TESTS, "smoke/nvlink"))
    for path in POLICIES:
        assert any("smoke/nvlink" in p for p in policy_problems(path.read_text())), path.name


def release_identity_matches(regexp: str) -> None:
    """The keyless identity is the release workflow of this repository (pipeline.build_image.SOURCE), and nothing else."""
    workflow = REPO_ROOT / ".github" / "workflows" / "release.yml"
    assert workflow.is_file()
    assert re.fullmatch(regexp, f"{SOURCE}/.github/workflows/{workflow.name}@refs/tags/v1.2.0")
    assert re.fullmatch(regexp, f"{SOURCE}/.github/workflows/{workflow.name}@refs/heads/main")
    for other in (
        f"{SOURCE}/.github/workflows/ci.yml@refs/tags/v1.2.0",
        f"{SOURCE}/.github/workflows/{workflow.name}@refs/heads/feature",
        f"{SOURCE}-fork/.github/workflows/{workflow.name}@refs/tags/v1.2.0",
        f"https://github.com/someone/proven-torch/.github/workflows/{workflow.name}@refs/tags/v1.2.0",
    ):
        assert not re.fullmatch(regexp, other), other


def published_image(matrix) -> str:
    """Where release.yml pushes: ghcr.io/<owner>/<the matrix's name>, the owner the source's."""
    owner = SOURCE.removeprefix("https://github.com/").split("/")[0]
    return f"ghcr.io/{owner}/{matrix.name}"


def test_kyverno_policy_structure(matrix):
    (doc,) = documents(KYVERNO)
    spec = doc["spec"]
    assert spec["background"] is False and spec["webhookConfiguration"]["failurePolicy"] == "Fail"
    rules = {rule["name"]: rule for rule in spec["rules"]}
    assert list(rules) == ["test-result-passed", "gpu-tests-ran-for-gpu-pods"]
    for rule in rules.values():
        assert rule["match"] == {"any": [{"resources": {"kinds": ["Pod"]}}]}
        refs = [tuple(entry["imageReferences"]) for entry in rule["verifyImages"]]
        assert refs == [tuple(e["imageReferences"]) for e in rules["test-result-passed"]["verifyImages"]]
        assert refs[0] == (f"{published_image(matrix)}:*", f"{published_image(matrix)}@*")
        for entry in rule["verifyImages"]:
            assert entry["failureAction"] == "Enforce"
            assert entry["mutateDigest"] is True and entry["verifyDigest"] is True and entry["required"] is True
            (attestation,) = entry["attestations"]
            (signers,) = attestation["attestors"]
            (signer,) = signers["entries"]
            if "keyless" in signer:  # cosign 3 stores a keyless attestation as a Sigstore bundle
                assert entry["type"] == "SigstoreBundle" and signer["keyless"]["issuer"] == GITHUB_OIDC
                release_identity_matches(signer["keyless"]["subjectRegExp"])
            else:  # a key: cosign's classic format, the one policy-controller also reads for keys
                assert entry["type"] == "Cosign" and "BEGIN PUBLIC KEY" in signer["keys"]["publicKeys"]
            (conditions,) = attestation["conditions"]
            assert conditions["all"][0] == {
                "key": "{{ result }}",
                "operator": "Equals",
                "value": "PASSED",
                "message": "the signed test result is {{ result }}, not PASSED",
            }
    gpu = rules["gpu-tests-ran-for-gpu-pods"]
    preconditions = " ".join(strings(gpu["preconditions"]))
    assert 'nodeSelector."nvidia.com/gpu.present"' in preconditions and 'limits."nvidia.com/gpu"' in preconditions
    for entry in gpu["verifyImages"]:
        warned = entry["attestations"][0]["conditions"][0]["all"][1]
        assert (warned["key"], warned["operator"]) == ("{{ warnedTests }}", "AllNotIn")
        assert sorted(warned["value"]) == sorted([*GPU_TESTS, *(f"*/{t}" for t in GPU_TESTS)])


def kyverno_admits(conditions: list[dict], predicate: dict) -> bool:
    """The attestation conditions read the way Kyverno reads Equals and AllNotIn (its
    pkg/engine/variables/operator: wildcards match either way), the predicate's fields as variables."""

    def value(text):
        name = re.fullmatch(r"{{\s*(\w+)\s*}}", text) if isinstance(text, str) else None
        return predicate[name.group(1)] if name else text

    def holds(c: dict) -> bool:
        key, wanted = value(c["key"]), c["value"]
        if c["operator"] == "Equals":
            return key == wanted
        if c["operator"] == "AllNotIn":
            return not any(fnmatch.fnmatchcase(k, w) or fnmatch.fnmatchcase(w, k) for k in key for w in wanted)
        raise AssertionError(f"no reading of operator {c['operator']} here")

    return all(holds(c) for block in conditions for c in block["all"])


def test_kyverno_conditions_admit_a_gpu_proof_and_refuse_a_cpu_only_one():
    (doc,) = documents(KYVERNO)
    by_rule = {}
    for r, _entry, attestation in kyverno_attestations(doc):
        by_rule.setdefault(r["name"], attestation["conditions"])
    proven = statements.test_result_predicate(records.validation(gpu=True), "sha256:1", [])
    cpu_only = statements.test_result_predicate(records.validation(gpu=False), "sha256:1", [])
    index_gpu_skipped = {**proven, "warnedTests": ["arm64/smoke/gpu"]}  # PASSED with a GPU test warned: never made, refused
    for name, conditions in by_rule.items():
        assert kyverno_admits(conditions, proven), name
        assert not kyverno_admits(conditions, cpu_only), name
    assert not kyverno_admits(by_rule["gpu-tests-ran-for-gpu-pods"], index_gpu_skipped)
    assert kyverno_admits(by_rule["gpu-tests-ran-for-gpu-pods"], {**proven, "warnedTests": ["arm64/smoke/versions"]})


def test_policy_controller_policy_structure(matrix):
    (doc,) = documents(POLICY_CONTROLLER)
    spec = doc["spec"]
    assert spec["mode"] == "enforce"
    assert spec["images"][0] == {"glob": f"{published_image(matrix)}**"}
    authorities = {a["name"]: a for a in spec["authorities"]}
    assert list(authorities) == ["release-workflow", "your-key"]
    release, key = authorities["release-workflow"], authorities["your-key"]
    assert release["signatureFormat"] == "bundle"  # cosign 3's default for what the release attaches
    (identity,) = release["keyless"]["identities"]
    assert identity["issuer"] == GITHUB_OIDC
    release_identity_matches(identity["subjectRegExp"])
    assert key.get("signatureFormat", "legacy") == "legacy"  # policy-controller takes bundles from keyless authorities only
    assert "BEGIN PUBLIC KEY" in key["key"]["data"]
    assert release["attestations"] == key["attestations"]
    (attestation,) = release["attestations"]
    assert attestation["predicateType"] == TEST_RESULT and attestation["policy"]["type"] == "rego"
    rego = attestation["policy"]["data"]
    assert rego.startswith("package sigstore\n") and "isCompliant if {" in rego  # what policy-controller queries
    listed = re.search(r"gpu_tests := \{([^}]*)\}", rego).group(1)
    assert sorted(json.loads(f"[{listed}]")) == sorted(GPU_TESTS)


# --- the predicates the release attaches with cosign (scripts/predicates-from-report.py) ----
#
# The release signs with cosign what build.py signs with --sign-key: the same predicates, made by
# pipeline.attest and pipeline.statements. Two small pieces of the script restate the pipeline
# (a later proof's record in Validation.as_dict's shape; an index's combined test result); the
# tests below hold each to the code it restates.

SCRIPT = REPO_ROOT / "scripts" / "predicates-from-report.py"
REPO = "ghcr.io/proven-torch/proven-torch"
DIGEST = "sha256:" + "a" * 64


def script():
    spec = importlib.util.spec_from_file_location("predicates_from_report", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gpu_proof() -> dict:
    """A proof.json of `proof --require-gpu` that passed: the record Validation.proof holds."""
    record = records.validation(gpu=True)
    return {
        "ok": True,
        "require_gpu": True,
        "gpu": True,
        "smoke": record["smoke"],
        "ppo": record["ppo"],
        "ppo_cpu": None,
        "gpu_cpu_sps_ratio": 3.1,
        "verdict": "proof: PASSED on NVIDIA H200",
        "failures": [],
        "seconds": 80.0,
        **record["proof"],
    }


def build_validation() -> dict:
    """validation.json of a CPU-only build (the release's hosted runners), as build.py stamps it."""
    return {**records.validation(gpu=False), "platform": "linux/amd64", "sbom": {"file": "sbom.cdx.json"}}


def test_a_later_proof_makes_the_record_validation_as_dict_makes():
    from pipeline.validate import Validation

    proof = gpu_proof()
    made = script().with_proof(build_validation(), proof)
    want = Validation(
        ok=True, gpu=True, proof=proof, hygiene=(), size={}, sbom={}, audit={}, seconds=1.0, failures=(), stages=()
    ).as_dict()
    build_stages = ("seconds", "failures", "stages", "hygiene", "size", "sbom", "audit")
    from_proof = [k for k in want if k not in build_stages]  # a field Validation gains is compared too
    assert {k: made[k] for k in from_proof} == {k: want[k] for k in from_proof}
    assert made["audit"] == build_validation()["audit"]  # the build's own stages stay


def test_an_index_test_result_is_the_one_attest_index_signs(tmp_path, monkeypatch, matrix):
    from pipeline import attest

    variant = next(v for v in matrix.variants if v.multi_arch)
    children = [
        {"platform": "linux/amd64", "digest": "sha256:" + "b" * 64, "validation": records.validation(gpu=True)},
        {"platform": "linux/arm64", "digest": "sha256:" + "c" * 64, "validation": records.validation(gpu=False)},
    ]
    signed: list[dict] = []
    monkeypatch.setattr(attest, "sign_and_attach", lambda signer, ref, digest, stmts: signed.extend(stmts))
    facts = attest.RunFacts(command=["build.py"], commit="0" * 40, started="2026-08-01T00:00:00Z", invocation="x", tools={})
    attest.attest_index(attest.Signer(key=None, facts=facts, base_images={}), REPO, DIGEST, variant, children)
    folders = []
    for child in children:
        folder = tmp_path / child["platform"].replace("/", "-")
        folder.mkdir()
        subject = {"name": REPO, "digest": child["digest"], "variant": variant.name, "platform": child["platform"]}
        (folder / "subject.json").write_text(json.dumps(subject))
        (folder / "validation.json").write_text(json.dumps(child["validation"]))
        folders.append(str(folder))
    out = tmp_path / "index"
    assert script().main(["index", str(out), "--ref", REPO, "--digest", DIGEST, *folders]) == 0
    want = next(s["predicate"] for s in signed if s["predicateType"] == PREDICATES["test-result"])
    assert json.loads((out / "test-result.json").read_text()) == want
    assert want["result"] == "WARNED" and "arm64/smoke/gpu" in want["warnedTests"]
    assert (out / "predicates.tsv").read_text() == f"{PREDICATES['test-result']}\ttest-result.json\n"


class FakeDocker:
    """What pipeline.attest asks of the Docker client: its version, and a base image it does not have."""

    class images:  # noqa: N801 - the Docker SDK's attribute name
        @staticmethod
        def get(name):
            raise LookupError(name)

    @staticmethod
    def version():
        return {"Version": "28.0.0", "ApiVersion": "1.48", "Components": []}


@pytest.fixture
def pushed_build(tmp_path, monkeypatch):
    """A pushed build's report folder (report.json, validation.json, the SBOM) and Docker faked."""
    from pipeline import docker_env

    run = tmp_path / "reports" / "2.9-cu128" / "20260801-000000"
    run.mkdir(parents=True)
    report = {
        "status": "pushed",
        "variant": "2.9-cu128",
        "revision": "0" * 40,
        "created": "2026-08-01T00:00:00Z",
        "stamped_image_id": "sha256:" + "d" * 64,
        "push": {"refs": {f"{REPO}:2.9-cu128-20260801": DIGEST}},
    }
    (run / "report.json").write_text(json.dumps(report))
    (run / "validation.json").write_text(json.dumps(build_validation()))
    (run / "sbom.cdx.json").write_text(json.dumps({"bomFormat": "CycloneDX", "specVersion": "1.6", "components": []}))
    monkeypatch.setattr(docker_env, "docker_client", lambda: FakeDocker())
    cli = docker_env.BuildCli(("docker", "buildx", "build"), (), "docker buildx")
    monkeypatch.setattr(docker_env, "find_build_cli", lambda: cli)
    return run


def test_a_pushed_build_gives_the_six_predicates_build_py_signs(pushed_build, tmp_path):
    out = tmp_path / "predicates"
    command = ["build.py", "--cuda", "12.8", "--push", "--registry", "ghcr.io/proven-torch"]
    assert script().main(["image", str(pushed_build / "report.json"), str(out), "--", *command]) == 0
    listed = dict(line.split("\t") for line in (out / "predicates.tsv").read_text().splitlines())
    assert listed == {uri: f"{kind}.json" for kind, uri in PREDICATES.items()}
    test = json.loads((out / "test-result.json").read_text())
    want = statements.test_result_predicate(build_validation(), "sha256:" + "d" * 64, test["configuration"], "base")
    assert test == want and test["result"] == "WARNED"  # the hosted build's proof: CPU only
    assert test["configuration"][0]["uri"] == f"{REPO}@{DIGEST}"
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["buildDefinition"]["externalParameters"]["command"] == command
    assert json.loads((out / "sbom.json").read_text())["bomFormat"] == "CycloneDX"
    assert json.loads((out / "subject.json").read_text()) == {
        "name": REPO,
        "digest": DIGEST,
        "variant": "2.9-cu128",
        "platform": "linux/amd64",
    }


def test_a_gpu_proof_replaces_the_test_result_and_benchmark_on_a_bare_python(pushed_build, tmp_path):
    out = tmp_path / "predicates"
    assert script().main(["image", str(pushed_build / "report.json"), str(out), "--", "build.py"]) == 0
    before = {p.name: p.read_text() for p in out.iterdir()}
    proof = tmp_path / "proof.json"
    proof.write_text(json.dumps(gpu_proof()))
    # -S -I: no site-packages, no environment: the GPU runners have no .venv
    done = subprocess.run(
        [sys.executable, "-S", "-I", str(SCRIPT), "proof", str(out), str(proof)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    test = json.loads((out / "test-result.json").read_text())
    assert test["result"] == "PASSED" and test["warnedTests"] == [] and "ppo-gate/cuda" in test["passedTests"]
    assert test["validatedOn"] == "linux/amd64: validated on a GPU"
    old = json.loads(before["test-result.json"])
    assert (test["imageId"], test["configuration"]) == (old["imageId"], old["configuration"])
    bench = json.loads((out / "benchmark.json").read_text())
    jsonschema.validate(bench, json.loads(statements.BENCHMARK_SCHEMA.read_text()))
    assert bench["device"] == "cuda:0" and bench["gpu_model"] == "NVIDIA H200"
    unchanged = ("provenance.json", "sbom.json", "vulns.json", "vex.json", "subject.json", "predicates.tsv")
    assert {n: (out / n).read_text() for n in unchanged} == {n: before[n] for n in unchanged}


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"status": "validated"}, "status 'validated', not 'pushed'"),
        ({"push": {"refs": {f"{REPO}:a": DIGEST, f"{REPO}:b": "sha256:" + "e" * 64}}}, "2 pushed digests"),
        ({"variant": "9.9-cu999"}, "line '9.9-cu999'"),
    ],
    ids=["not-pushed", "two-digests", "unknown-line"],
)
def test_a_report_that_cannot_be_attested_is_one_line(pushed_build, tmp_path, capsys, change, said):
    report = pushed_build / "report.json"
    report.write_text(json.dumps({**json.loads(report.read_text()), **change}))
    assert script().main(["image", str(report), str(tmp_path / "out"), "--", "build.py"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("predicates-from-report: ") and said in err and err.count("\n") == 1
