"""The deploy manifests validate offline, strictly: the core kinds against a current Kubernetes
release's schemas (kubernetes-validate --strict), the Kubeflow TrainJob against the CRD schema of
the Trainer release it targets (deploy/kubeflow/trainjob.schema.json), checked as the API server
checks a custom resource on create. The admission policies (deploy/policy/) validate against their
engines' CRDs, decide as they must on the test results the pipeline makes (the rego run by a Rego
evaluator, Kyverno's JMESPath by the jmespath library), give each signer its own images, and name
only what pipeline/statements.py names; the predicates the release attaches with cosign
(`build.py sign --prepare`) are the statements pipeline.attest signs."""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib
import importlib.util
import json
import lzma
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


def crd_problems(doc: dict, schema: dict) -> list[str]:
    """What the API server refuses when `doc` is created as a custom resource whose CRD has `schema`
    (the TrainJob here, the admission policies below). apiVersion, kind and metadata are the API
    server's own, whether the schema declares them or not."""
    problems = [f"{dotted(e.absolute_path)}: {e.message}" for e in jsonschema.Draft4Validator(schema).iter_errors(doc)]
    # The root metadata is an ObjectMeta, which the API server checks against its own schema.
    meta = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc.get("metadata")}
    try:
        kubernetes_validate.validate(meta, kubernetes_validate.latest_version(), strict=True)
    except kubernetes_validate.ValidationError as err:
        problems.append(f"metadata: {err.message}")
    body = {key: value for key, value in doc.items() if key not in ("apiVersion", "kind", "metadata")}
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
        assert crd_problems(doc, schema) == []


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
    problems = crd_problems(doc, trainjob_schema())
    assert any(named in p for p in problems), problems


def test_an_unmapped_cel_rule_fails_rather_than_passing():
    schema = copy.deepcopy(trainjob_schema())
    schema["properties"]["spec"]["x-kubernetes-validations"] = [{"rule": "has(self.trainer)"}]
    (doc,) = documents(TRAINJOBS[0])
    assert any("has no Python equivalent" in p for p in crd_problems(doc, schema))


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


# --- admission policies (deploy/policy/) ---------------------------------------
#
# Neither engine, nor cosign, nor OPA installs here, and no cluster runs the policies. What runs:
# - every policy object against its engine's CRD schema (tests/fixtures/crds/: the upstream
#   files, checked by git blob id), unknown fields included, as the API server checks on create;
# - policy-controller's rego, by a Rego evaluator (regopy: rego-cpp's Python bindings) queried
#   as cosign queries it, on test-result statements that pipeline.statements makes;
# - Kyverno's conditions and preconditions: each JMESPath expression by the jmespath library on
#   the same statements and on pod specs (kyverno_holds says what that leaves out);
# - the names the policies read, tied to pipeline/statements.py (PREDICATES, TEST_RESULT_FIELDS,
#   GPU_TESTS): a rename on either side fails.
# Not exercised: signature, certificate and transparency-log checks, the registry look-ups (and
# Kyverno's 50-referrer limit), image-reference matching, how an engine picks the statements it
# evaluates (docs/scale-out.md, "Admit only proven images", says how each does).

POLICY_DIR = REPO_ROOT / "deploy" / "policy"
KYVERNO = POLICY_DIR / "kyverno-require-proven.yaml"
POLICY_CONTROLLER = POLICY_DIR / "policy-controller-require-proven.yaml"
POLICIES = [KYVERNO, POLICY_CONTROLLER]
CRDS = REPO_ROOT / "tests" / "fixtures" / "crds"
TEST_RESULT = PREDICATES["test-result"]
GITHUB_OIDC = "https://token.actions.githubusercontent.com"
SELF_BUILT = "registry.example.com/proven-torch"  # the placeholder for the user's --registry


def require(module: str, package: str):
    """A dependency of these tests, or one line naming it: a missing evaluator fails, never skips."""
    try:
        return importlib.import_module(module)
    except ImportError:
        pass
    pytest.fail(f"{package} is not installed: `.venv/bin/pip install -r requirements-dev.txt` brings it", pytrace=False)


def policy_objects(path: Path) -> list[dict]:
    """The objects of a policy file; a v1 List's items one by one, as kubectl applies them."""
    found = []
    for doc in documents(path):
        found += doc["items"] if (doc["apiVersion"], doc["kind"]) == ("v1", "List") else [doc]
    return found


def vendored_crds() -> dict[str, dict[str, str]]:
    """tests/fixtures/crds/README.md's table: file name -> {column: value}."""
    lines = (CRDS / "README.md").read_text().splitlines()
    header, *rows = [
        [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")] for line in lines if line.startswith("| ")
    ]
    return {row[0]: dict(zip(header, row, strict=True)) for row in rows}


def crd_bytes(name: str) -> bytes:
    data = (CRDS / name).read_bytes()
    return lzma.decompress(data) if name.endswith(".xz") else data


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@functools.cache
def vendored_crd(name: str) -> dict:
    return yaml.load(crd_bytes(name), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def crd_schema(api_version: str, kind: str) -> dict:
    """The openAPIV3Schema that the vendored CRD of `kind` gives `api_version`; fails if none does."""
    group, _, version = api_version.rpartition("/")
    for crd in map(vendored_crd, vendored_crds()):
        if (crd["spec"]["group"], crd["spec"]["names"]["kind"]) == (group, kind):
            for served in crd["spec"]["versions"]:
                if served["name"] == version and served.get("served"):
                    return served["schema"]["openAPIV3Schema"]
    pytest.fail(f"no vendored CRD (tests/fixtures/crds/) serves {kind} in {api_version}")


def test_the_vendored_crds_are_the_upstream_files():
    rows = vendored_crds()
    beside = {"README.md", "LICENSE", "NOTICE.kyverno"}
    assert set(rows) == {p.name for p in CRDS.iterdir()} - beside, "a vendored file the README does not name, or the reverse"
    for name, row in rows.items():
        assert git_blob_id(crd_bytes(name)) == row["git blob"], f"{name} is not {row['repository']} {row['path']} at {row['tag']}"
        assert row["repository"].startswith("https://github.com/") and re.fullmatch(r"[0-9a-f]{40}", row["commit"])
    assert (CRDS / "LICENSE").read_text().lstrip().startswith("Apache License")


POLICY_OBJECTS = [(path, obj) for path in POLICIES for obj in policy_objects(path)]


def test_the_policy_folder_holds_one_file_per_admission_controller():
    assert sorted(POLICY_DIR.glob("*")) == POLICIES
    assert {(o["apiVersion"], o["kind"]) for o in policy_objects(KYVERNO)} == {("kyverno.io/v1", "ClusterPolicy")}
    assert {(o["apiVersion"], o["kind"]) for o in policy_objects(POLICY_CONTROLLER)} == {
        ("policy.sigstore.dev/v1beta1", "ClusterImagePolicy")
    }


@pytest.mark.parametrize(("path", "obj"), POLICY_OBJECTS, ids=[f"{p.name}:{o['metadata']['name']}" for p, o in POLICY_OBJECTS])
def test_a_policy_validates_against_its_engines_crd(path, obj):
    assert crd_problems(obj, crd_schema(obj["apiVersion"], obj["kind"])) == []


@pytest.mark.parametrize(
    ("path", "good", "bad", "named"),
    [
        (
            KYVERNO,
            "imageReferences: &published",
            "imageReference: &published",
            "verifyImages[0].imageReference: field not declared",
        ),
        (KYVERNO, "type: SigstoreBundle", "type: Sigstore", "'Sigstore' is not one of"),
        (KYVERNO, "operator: Equals", "operator: Equal", "'Equal' is not one of"),
        (KYVERNO, "subjectRegExp:", "subjectRegex:", "keyless.subjectRegex: field not declared"),
        (POLICY_CONTROLLER, "predicateType: https", "predicateTyp: https", "attestations[0].predicateTyp: field not declared"),
        (POLICY_CONTROLLER, "signatureFormat: bundle", "signatureFormat: [bundle]", "signatureFormat: ['bundle'] is not of type"),
        (POLICY_CONTROLLER, "- glob: ", "- globs: ", "images[0].globs: field not declared"),
    ],
    ids=["kyverno-field", "kyverno-enum", "kyverno-operator", "kyverno-keyless", "pc-field", "pc-type", "pc-images"],
)
def test_a_broken_policy_fails_its_crd_with_the_field_named(path, good, bad, named):
    text = path.read_text()
    assert good in text, good
    problems = []
    for doc in (d for d in yaml.safe_load_all(text.replace(good, bad, 1)) if d):
        for obj in doc.get("items", [doc]):
            problems += crd_problems(obj, crd_schema(obj["apiVersion"], obj["kind"]))
    assert any(named in p for p in problems), problems


# --- what the policies decide, on statements the pipeline makes ----------------


def rego_admits(module: str, statement: dict) -> bool:
    """policy-controller's verdict on one statement: cosign (v3.0.5, which policy-controller v0.15.1
    uses: pkg/cosign/rego/rego.go, ValidateJSONWithModuleInput) loads the policy as module
    sigstore.rego, queries `isCompliant = data.sigstore.isCompliant` with the statement as input,
    and passes it when the binding is true (the result-object form is not used here). cosign
    parses the module as Rego v0; `import rego.v1` makes it read the same in both versions."""
    regopy = require("regopy", "regopy (rego-cpp's Python bindings, a Rego evaluator)")
    assert "\nimport rego.v1\n" in module, "without `import rego.v1` cosign (Rego v0) reads this module otherwise"
    rego = regopy.Interpreter()
    rego.add_module("sigstore.rego", module)  # raises on a module that does not compile
    rego.set_input(statement)
    out = rego.query("isCompliant = data.sigstore.isCompliant")
    assert out.ok(), str(out)
    return any(result.bindings.get("isCompliant") is True for result in out.results)


def kyverno_holds(condition: dict, data) -> bool:
    """One Kyverno condition on `data` (a statement's predicate, or {"request": {"object": pod}}).

    Exercised: the key's JMESPath expression, by the jmespath library; a statement it cannot be
    evaluated on (a missing list, a wrong type) is refused, as Kyverno refuses the attestation
    when a condition errors (v1.19.0 pkg/engine/internal/imageverifier.go, verifyAttestation).
    Read, not run: Kyverno's Equals (pkg/engine/variables/operator/equal.go) is equality for a bool,
    an integer or a string without wildcards, so every condition must be that; any other operator
    fails here rather than be imitated. Not exercised: Kyverno's own JMESPath (go-jmespath with
    extra functions; the expressions use standard ones only) and its substitution of `message`."""
    jmespath = require("jmespath", "jmespath (the JMESPath library)")
    key, want = condition["key"], condition["value"]
    expression = re.fullmatch(r"\{\{(.*)\}\}", key.strip(), re.S)
    assert expression, f"{key!r}: a key is one {{{{ JMESPath }}}} expression here"
    assert condition["operator"] == "Equals", f"{key!r}: only Equals is read here, not {condition['operator']}"
    assert isinstance(want, (bool, int)) or (isinstance(want, str) and not set(want) & set("*?")), want
    try:
        got = jmespath.search(expression.group(1).strip(), data)
    except jmespath.exceptions.JMESPathError:
        return False
    return type(got) is type(want) and got == want


def kyverno_admits(conditions: list[dict], statement: dict) -> bool:
    """An attestation's conditions on one statement: Kyverno evaluates them on its predicate (an
    object, else an error: v1.19.0 pkg/engine/internal/utils.go, EvaluateConditions); every
    condition of every `all` block must hold."""
    predicate = statement.get("predicate")
    for block in conditions:
        assert set(block) == {"all"}, f"only `all` blocks are read here: {sorted(block)}"
    return isinstance(predicate, dict) and all(kyverno_holds(c, predicate) for block in conditions for c in block["all"])


def rego_of(cip: dict) -> str:
    (authority,) = cip["spec"]["authorities"]
    (attestation,) = authority["attestations"]
    assert (attestation["predicateType"], attestation["policy"]["type"]) == (TEST_RESULT, "rego")
    return attestation["policy"]["data"]


def kyverno_conditions() -> dict[str, list[tuple[dict, list[dict]]]]:
    """rule name -> [(verifyImages entry, conditions of its test-result attestation)]."""
    (policy,) = policy_objects(KYVERNO)
    found: dict[str, list] = {}
    for rule in policy["spec"]["rules"]:
        for entry in rule["verifyImages"]:
            (attestation,) = entry["attestations"]
            assert attestation["type"] == TEST_RESULT
            found.setdefault(rule["name"], []).append((entry, attestation["conditions"]))
    return found


REPO = "ghcr.io/proven-torch/proven-torch"
DIGEST = "sha256:" + "a" * 64


def statement_of(predicate) -> dict:
    return statements.statement("test-result", statements.Subject(REPO, DIGEST), predicate)


def index_predicate(arm64_gpu: bool) -> dict:
    """A multi-arch index's combined test result: amd64 proven on a GPU, arm64 on a GPU or on its CPU."""
    children = [
        {"platform": "linux/amd64", "digest": "sha256:" + "b" * 64, "validation": records.validation(gpu=True)},
        {"platform": "linux/arm64", "digest": "sha256:" + "c" * 64, "validation": records.validation(gpu=arm64_gpu)},
    ]
    return statements.index_test_result(REPO, children)


def proof(gpu: bool = True, ok: bool = True) -> dict:
    return statements.test_result_predicate(records.validation(gpu=gpu, ok=ok), "sha256:" + "d" * 64, [])


# name: (the test result, admitted by policy-controller, by Kyverno's rule 1, by its GPU rule)
DECISIONS = {
    "gpu-proof-passed": (lambda: proof(), True, True, True),
    "index-both-gpu-proven": (lambda: index_predicate(arm64_gpu=True), True, True, True),
    "cpu-only-proof-warned": (lambda: proof(gpu=False), False, False, False),
    "gpu-proof-failed": (lambda: proof(ok=False), False, False, False),
    "index-arm64-cpu-only-warned": (lambda: index_predicate(arm64_gpu=False), False, False, False),
    # Never made by the pipeline (a GPU test warned makes WARNED); rule 1 reads the result only.
    "passed-yet-arm64-gpu-warned": (lambda: {**proof(), "warnedTests": ["arm64/smoke/gpu"]}, False, True, False),
    "passed-a-cpu-test-warned": (lambda: {**proof(), "warnedTests": ["arm64/smoke/versions"]}, True, True, True),
    "malformed-no-warned-list": (lambda: {k: v for k, v in proof().items() if k != "warnedTests"}, False, True, False),
    "malformed-warned-not-a-list": (lambda: {**proof(), "warnedTests": "smoke/gpu"}, False, True, False),
    "malformed-result-lowercase": (lambda: {**proof(), "result": "passed"}, False, False, False),
    "malformed-predicate-not-an-object": (lambda: "PASSED", False, False, False),
}


@pytest.mark.parametrize("name", DECISIONS)
def test_policy_controller_decides(name):
    make, admitted, _rule1, _gpu_rule = DECISIONS[name]
    for cip in policy_objects(POLICY_CONTROLLER):
        got = rego_admits(rego_of(cip), statement_of(make()))
        assert got is admitted, f"{cip['metadata']['name']} {'admits' if got else 'refuses'} {name}"


def test_policy_controller_refuses_a_statement_of_another_type():
    for cip in policy_objects(POLICY_CONTROLLER):
        other = {**statement_of(proof()), "predicateType": PREDICATES["benchmark"]}
        assert not rego_admits(rego_of(cip), other)


@pytest.mark.parametrize("name", DECISIONS)
def test_kyverno_decides(name):
    make, _admitted, rule1, gpu_rule = DECISIONS[name]
    expected = {"test-result-passed": rule1, "gpu-tests-ran-for-gpu-pods": gpu_rule}
    rules = kyverno_conditions()
    assert set(rules) == set(expected)
    for rule, entries in rules.items():
        for entry, conditions in entries:
            got = kyverno_admits(conditions, statement_of(make()))
            assert got is expected[rule], f"rule {rule} for {entry['imageReferences'][0]} {'admits' if got else 'refuses'} {name}"


@pytest.mark.parametrize("gpu_test", GPU_TESTS)
def test_each_gpu_test_warned_is_refused_by_its_name_and_as_an_index_names_it(gpu_test):
    """PASSED with one GPU test warned (a contradiction the pipeline never signs): refused by the
    policies that require GPU tests, under the test's own name and an index's (arm64/...)."""
    gpu_rule = [c for _entry, c in kyverno_conditions()["gpu-tests-ran-for-gpu-pods"]]
    for name in (gpu_test, f"arm64/{gpu_test}"):
        stmt = statement_of({**proof(), "warnedTests": [name]})
        assert not any(rego_admits(rego_of(cip), stmt) for cip in policy_objects(POLICY_CONTROLLER)), name
        assert not any(kyverno_admits(conditions, stmt) for conditions in gpu_rule), name
    lookalike = statement_of({**proof(), "warnedTests": [f"x{gpu_test}", f"{gpu_test}x"]})  # a name ending alike is not it
    assert all(rego_admits(rego_of(cip), lookalike) for cip in policy_objects(POLICY_CONTROLLER))
    assert all(kyverno_admits(conditions, lookalike) for conditions in gpu_rule)


def pod(**spec) -> dict:
    return {"spec": {"containers": [{"name": "main"}], **spec}}


@pytest.mark.parametrize(
    ("where", "spec", "applies"),
    [
        ("workspace.yaml", None, True),
        ("multi-node-proof.yaml", None, True),
        ("gpu-node-selector", pod(nodeSelector={"nvidia.com/gpu.present": "true"}), True),
        ("cpu-pod", pod(), False),
        ("gpu-selector-false", pod(nodeSelector={"nvidia.com/gpu.present": "false"}), False),
        ("cpu-limits-only", pod(containers=[{"name": "main", "resources": {"limits": {"cpu": "2"}}}]), False),
    ],
)
def test_kyverno_gpu_rule_applies_to_pods_that_ask_for_a_gpu(where, spec, applies):
    """The GPU rule's preconditions (any one holds), evaluated on pod specs; a manifest's pods by
    their template (Kyverno's autogen applies a Pod rule to a Deployment's or a Job's pods)."""
    if spec is None:
        (doc,) = [d for d in documents(REPO_ROOT / "deploy" / "kubernetes" / where) if d["kind"] in ("Deployment", "Job")]
        spec = {"spec": doc["spec"]["template"]["spec"]}
    (policy,) = policy_objects(KYVERNO)
    (rule,) = [r for r in policy["spec"]["rules"] if r["name"] == "gpu-tests-ran-for-gpu-pods"]
    assert set(rule["preconditions"]) == {"any"}
    request = {"request": {"object": spec}}
    assert any(kyverno_holds(c, request) for c in rule["preconditions"]["any"]) is applies


# --- who must have signed: one trust root per set of images --------------------


def release_identity_matches(regexp: str) -> None:
    """The keyless identity is the release workflow of this repository (pipeline.build_image.SOURCE)
    run for a v* tag, and nothing else: not a branch (main included), a fork or another workflow."""
    workflow = REPO_ROOT / ".github" / "workflows" / "release.yml"
    assert workflow.is_file()
    assert re.fullmatch(regexp, f"{SOURCE}/.github/workflows/{workflow.name}@refs/tags/v1.2.0")
    for other in (
        f"{SOURCE}/.github/workflows/{workflow.name}@refs/heads/main",
        f"{SOURCE}/.github/workflows/{workflow.name}@refs/heads/v1.2.0",
        f"{SOURCE}/.github/workflows/{workflow.name}@refs/tags/1.2.0",
        f"{SOURCE}/.github/workflows/ci.yml@refs/tags/v1.2.0",
        f"{SOURCE}-fork/.github/workflows/{workflow.name}@refs/tags/v1.2.0",
        f"https://github.com/someone/proven-torch/.github/workflows/{workflow.name}@refs/tags/v1.2.0",
    ):
        assert not re.fullmatch(regexp, other), other


def published_image(matrix) -> str:
    """Where release.yml pushes: ghcr.io/<owner>/<the matrix's name>, the owner the source's."""
    owner = SOURCE.removeprefix("https://github.com/").split("/")[0]
    return f"ghcr.io/{owner}/{matrix.name}"


def test_each_policy_controller_policy_has_one_trust_root_for_its_own_images(matrix):
    """policy-controller admits an image when any authority of a policy passes, and asks every
    policy whose glob matches: so each trust root gets a policy of its own, for its images only."""
    published = published_image(matrix)
    roots = {}
    for cip in policy_objects(POLICY_CONTROLLER):
        (authority,) = cip["spec"]["authorities"]
        globs = [image["glob"] for image in cip["spec"]["images"]]
        if "keyless" in authority:  # the release: its identity, a Fulcio certificate and the log
            (identity,) = authority["keyless"]["identities"]
            assert identity["issuer"] == GITHUB_OIDC and authority["signatureFormat"] == "bundle" and "ctlog" in authority
            release_identity_matches(identity["subjectRegExp"])
            roots["release"] = globs
        else:  # your key, cosign's classic format (policy-controller takes bundles from keyless authorities only)
            assert "BEGIN PUBLIC KEY" in authority["key"]["data"] and authority.get("signatureFormat", "legacy") == "legacy"
            roots["key"] = globs
        assert cip["spec"]["mode"] == "enforce"
    assert roots == {"release": [f"{published}:*", f"{published}@*"], "key": [f"{SELF_BUILT}:*", f"{SELF_BUILT}@*"]}


def test_each_kyverno_entry_has_one_trust_root_for_its_own_images(matrix):
    """Each verifyImages entry names the images of one signer only, enforced, checked by digest."""
    (policy,) = policy_objects(KYVERNO)
    assert policy["spec"]["background"] is False and policy["spec"]["webhookConfiguration"]["failurePolicy"] == "Fail"
    published = published_image(matrix)
    for rule in policy["spec"]["rules"]:
        roots = {}
        for entry in rule["verifyImages"]:
            assert entry["failureAction"] == "Enforce" and entry["required"] is True
            assert entry["mutateDigest"] is True and entry["verifyDigest"] is True
            (attestation,) = entry["attestations"]
            (attestors,) = attestation["attestors"]
            (signer,) = attestors["entries"]
            if "keyless" in signer:  # the release: a Sigstore bundle, its identity, the log and the SCT
                keyless = signer["keyless"]
                assert entry["type"] == "SigstoreBundle" and keyless["issuer"] == GITHUB_OIDC
                assert not keyless.get("rekor", {}).get("ignoreTlog") and not keyless.get("ctlog", {}).get("ignoreSCT")
                release_identity_matches(keyless["subjectRegExp"])
                roots["release"] = entry["imageReferences"]
            else:  # your key: cosign's classic format
                assert entry["type"] == "Cosign" and "BEGIN PUBLIC KEY" in signer["keys"]["publicKeys"]
                roots["key"] = entry["imageReferences"]
        assert roots == {"release": [f"{published}:*", f"{published}@*"], "key": [f"{SELF_BUILT}:*", f"{SELF_BUILT}@*"]}


# --- one source of names: pipeline/statements.py -------------------------------
#
# The predicate type, the test-result fields and the GPU test names a policy reads must be the
# ones pipeline/statements.py names (PREDICATES, TEST_RESULT_FIELDS, GPU_TESTS); the names are
# found in the policy's own text, so a rename on either side fails here.


def named_predicate_types(text: str) -> set[str]:
    """Every URI in the text that is a predicate type of the pipeline or looks like an in-toto one."""
    uris = set(re.findall(r"https://[^\s\"'`,)\]}]+", text))
    return {u for u in uris if u in PREDICATES.values() or "/attestation/" in u}


def named_gpu_tests(text: str) -> set[str]:
    """Every test name in the text with the prefix of a GPU test (smoke/..., ppo-gate/...), alone, as
    a suffix ('/smoke/gpu') or under an architecture wildcard (*/smoke/gpu); an index's example name
    (arm64/smoke/gpu) is not one."""
    prefixes = "|".join(sorted(re.escape(t.split("/")[0]) for t in GPU_TESTS))
    return set(re.findall(rf"(?<![\w/*-])(?:\*/|/)?((?:{prefixes})/[\w.-]+)", text))


def strings(value) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


def root_fields(node: dict) -> set[str]:
    """The fields a JMESPath expression (jmespath's parsed tree) reads from the document it is
    evaluated on; not those a projection's right side or filter reads from each element."""
    if node["type"] == "field":
        return {node["value"]}
    children = node.get("children", [])
    if node["type"] in ("subexpression", "index_expression", "projection", "filter_projection", "pipe"):
        children = children[:1]
    return {f for child in children for f in root_fields(child)}


def kyverno_fields(text: str) -> set[str]:
    jmespath = require("jmespath", "jmespath (the JMESPath library)")
    return {f for expr in re.findall(r"\{\{(.*?)\}\}", text, re.S) for f in root_fields(jmespath.compile(expr.strip()).parsed)}


def asked_for(obj: dict) -> list[tuple[str, str, str]]:
    """(where, predicate type asked for, test-result field read) of a policy object; '' where none."""
    found = []
    if obj["kind"] == "ClusterPolicy":
        for rule in obj["spec"]["rules"]:
            for entry in rule.get("verifyImages", []):
                for attestation in entry.get("attestations", []):
                    where = f"rules[{rule['name']}]"
                    found.append((where, attestation.get("type") or attestation.get("predicateType", ""), ""))
                    for text in strings(attestation.get("conditions", [])):
                        found += [(where, "", field) for field in kyverno_fields(text)]
    else:
        for authority in obj["spec"]["authorities"]:
            for attestation in authority.get("attestations", []):
                where = f"{obj['metadata']['name']}.authorities[{authority['name']}]"
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
        for obj in doc.get("items", [doc]):
            for where, predicate_type, field in asked_for(obj):
                if predicate_type and predicate_type != TEST_RESULT:
                    problems.append(f"{where}: asks for predicate type {predicate_type}, not {TEST_RESULT}")
                if field and field not in TEST_RESULT_FIELDS:
                    problems.append(f"{where}: reads {field!r}, not one of TEST_RESULT_FIELDS {TEST_RESULT_FIELDS}")
    if (tests := named_gpu_tests(text)) != set(GPU_TESTS):
        problems.append(f"GPU tests named: {sorted(tests)}; pipeline.statements.GPU_TESTS: {sorted(GPU_TESTS)}")
    return problems


@pytest.mark.parametrize("path", POLICIES, ids=[p.name for p in POLICIES])
def test_a_policy_names_only_what_pipeline_statements_names(path):
    assert policy_problems(path.read_text()) == []
    for obj in policy_objects(path):
        assert {f for _, _, f in asked_for(obj)} - {""} == {"result", "warnedTests"}, obj["metadata"]["name"]


@pytest.mark.parametrize(
    ("path", "good", "bad", "named"),
    [
        (KYVERNO, TEST_RESULT, TEST_RESULT.replace("v0.1", "v0.2"), "test-result/v0.2"),
        (POLICY_CONTROLLER, TEST_RESULT, TEST_RESULT.replace("v0.1", "v0.2"), "test-result/v0.2"),
        (KYVERNO, "'/smoke/gpu'", "'/smoke/cuda'", "smoke/cuda"),
        (POLICY_CONTROLLER, '"smoke/gpu"', '"smoke/cuda"', "smoke/cuda"),
        (KYVERNO, "'/ppo-gate/cuda'", "'/ppo-gate/gpu'", "ppo-gate/gpu"),
        (KYVERNO, "{{ warnedTests }}", "{{ warnedTest }}", "reads 'warnedTest'"),
        (KYVERNO, "length(warnedTests[", "length(warned_tests[", "reads 'warned_tests'"),
        (POLICY_CONTROLLER, "input.predicate.result", "input.predicate.status", "reads 'status'"),
        (POLICY_CONTROLLER, "predicateType: https", "predicateType: cyclonedx # https", "asks for predicate type cyclonedx"),
    ],
    ids=[
        "kyverno-type",
        "pc-type",
        "kyverno-gpu",
        "pc-gpu",
        "kyverno-gate",
        "kyverno-field",
        "kyverno-field-in-expression",
        "pc-field",
        "pc-short-type",
    ],
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
