"""The deploy manifests validate offline, strictly: the core kinds against a current Kubernetes
release's schemas (kubernetes-validate --strict), the Kubeflow TrainJob against the CRD schema of
the Trainer release it targets (deploy/kubeflow/trainjob.schema.json), checked as the API server
checks a custom resource on create."""

from __future__ import annotations

import copy
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

from pipeline.variants import REPO_ROOT

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
