"""The release workflow keeps its secrets away from the build's code (issue 43): a job that holds a signing
secret or the keyless identity (`id-token: write`) runs nothing from the checkout's venv, build.py or make;
the keyless jobs check out no code at all; the signing job runs the signer's hash-locked venv alone; every
job reads only this run's artifacts and refuses links in them. Each rule is also shown to catch a workflow
edited to break it."""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from pipeline.variants import REPO_ROOT

pytestmark = pytest.mark.unit

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "release.yml"
SECRET = re.compile(r"secrets\.PROVEN_TORCH_")
BUILD_CODE = re.compile(r"\.venv/|build\.py|\bmake\b|scripts/host-venv\.sh")
LINKS = "Refuse links in the artifacts"


def jobs(workflow: dict | None = None) -> dict[str, dict]:
    return (workflow or yaml.safe_load(WORKFLOW.read_text()))["jobs"]


def scripts_run(step: dict) -> list[str]:
    """The repository scripts a step's shell runs."""
    return re.findall(r"bash (scripts/[\w.-]+)", step.get("run", ""))


def code_of(script: str) -> str:
    """A script's commands, without its comment lines."""
    return "\n".join(line for line in (REPO_ROOT / script).read_text().splitlines() if not line.lstrip().startswith("#"))


def violations(workflow: dict) -> list[str]:
    found = []
    for name, job in jobs(workflow).items():
        holds_secret = bool(SECRET.search(yaml.safe_dump(job)))
        keyless = (job.get("permissions") or {}).get("id-token") == "write"
        steps = job.get("steps", [])
        if holds_secret or keyless:
            for step in steps:
                code = step.get("run", "") + "".join(code_of(s) for s in scripts_run(step))
                if BUILD_CODE.search(code):
                    found.append(f"{name}: runs the build's code beside a secret: {BUILD_CODE.search(code)[0]}")  # type: ignore[index]
        if keyless and any(str(s.get("uses", "")).startswith("actions/checkout") for s in steps):
            found.append(f"{name}: holds id-token: write and checks out code")
        if holds_secret and SECRET.search(yaml.safe_dump({k: v for k, v in job.items() if k != "steps"})):
            found.append(f"{name}: a signing secret in the job's environment (every step would see it)")
        downloads = [i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("actions/download-artifact")]
        for i in downloads:
            inputs = steps[i].get("with") or {}
            if {"run-id", "github-token", "repository"} & set(inputs):
                found.append(f"{name}: downloads another run's artifact")
        if downloads and not any(s.get("name", "").startswith(LINKS) for s in steps[max(downloads) :]):
            found.append(f"{name}: reads artifacts without refusing links in them")
    return found


def test_the_release_workflow_keeps_its_secrets_apart():
    assert violations(yaml.safe_load(WORKFLOW.read_text())) == []


def test_the_signing_job_holds_the_key_and_runs_the_signer_alone():
    sign = jobs()["sign"]
    assert sign["environment"] == "release" and sign["permissions"] == {"contents": "read"}
    runs = [s["run"] for s in sign["steps"] if "run" in s and LINKS not in s.get("name", "")]
    assert runs == ["bash scripts/signer-venv.sh", "bash scripts/release-sign.sh prepared signed"]
    script = (REPO_ROOT / "scripts" / "release-sign.sh").read_text()
    assert ".venv-signer/bin/python -s -E -m pipeline.attest" in script and "unset SIGN_KEY_PEM SIGN_KEY_PASSPHRASE" in script


@pytest.mark.parametrize(
    ("job", "edit", "said"),
    [
        ("sign", lambda j: j["steps"].append({"run": ".venv/bin/python build.py sign X"}), "runs the build's code"),
        ("attest-keyless", lambda j: j["steps"].append({"run": "make image"}), "runs the build's code"),
        ("attest-keyless", lambda j: j["steps"].insert(0, {"uses": "actions/checkout@v9"}), "checks out code"),
        ("sign", lambda j: j.update(env={"K": "${{ secrets.PROVEN_TORCH_SIGN_KEY_PEM }}"}), "job's environment"),
        ("attach", lambda j: j["steps"][1].setdefault("with", {}).update({"run-id": "1"}), "another run's artifact"),
        ("prepare", lambda j: j.update(steps=[s for s in j["steps"] if LINKS not in s.get("name", "")]), "refusing links"),
    ],
    ids=["venv-in-sign", "make-in-keyless", "checkout-in-keyless", "secret-in-job-env", "other-run", "links"],
)
def test_each_rule_catches_a_workflow_edited_to_break_it(job, edit, said):
    workflow = copy.deepcopy(yaml.safe_load(WORKFLOW.read_text()))
    edit(workflow["jobs"][job])
    assert any(said in v and v.startswith(job) for v in violations(workflow)), violations(workflow)
