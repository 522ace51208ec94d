"""The pipeline end to end against a real Docker Engine and a real registry on 127.0.0.1.

The session fixture `pipeline_run` (conftest.py) built, validated, tagged and
pushed the default image; these tests check what it left behind, then feed the
stages bad images, bad registries and interrupts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from pipeline import push
from pipeline.docker_env import find_build_cli
from pipeline.errors import PushFailed, ValidationFailed
from pipeline.render import dockerfile_path, spec_path
from pipeline.stamp import validate_and_tag
from pipeline.target import Target, Validation
from pipeline.variants import REPO_ROOT, load_matrix, resolve
from tests.image.conftest import HEADLESS_CHROMIUM, REGISTRY, ca_cert, need_chromium, registry_manifest

pytestmark = pytest.mark.image


def test_report_says_pushed_and_cpu_only(report, run_result):
    assert report["status"] == "pushed"
    assert report["gpu"] is False
    assert report["validated_image_id"] == run_result.validated_id
    assert report["stamped_image_id"] == run_result.stamped_id
    assert report["validation"]["ok"] is True


def test_the_report_comes_from_the_proof(report, run_result):
    """build.py validates by running `proof` in the image: its record is the report's."""
    proof = json.loads(run_result.report_path.with_name("proof.json").read_text())
    assert report["validation"]["smoke"] == proof["smoke"] and report["validation"]["ppo"] == proof["ppo"]
    assert report["validation"]["verdict"] == proof["verdict"] and proof["verdict"].startswith("proof: PROVEN on the CPU only")
    assert [s["name"] for s in report["validation"]["stages"]] == [
        "labels, spec and size",
        "hygiene scan",
        "SBOM and audit",
        "proof",
    ]
    assert {s["status"] for s in report["validation"]["stages"]} == {"pass"}


def test_the_stamped_record_does_not_change_after_the_push(report, run_result):
    """validation.json is hashed into a label; the push has a record of its own."""
    record = json.loads(run_result.report_path.with_name("validation.json").read_text())
    assert record == report["validation"]
    assert report["push"]["refs"] == run_result.pushed and report["push"]["compressed_bytes"]["gzip"] > 1e9


def test_release_figures_travel_with_the_image(docker, run_result, report):
    config = docker.images.get(run_result.stamped_id).attrs["Config"]
    env = dict(item.split("=", 1) for item in config["Env"])
    release = json.loads(env["PROVEN_TORCH_RELEASE"])
    assert json.loads(config["Labels"]["io.proven-torch.release-ppo"]) == release
    ppo = report["validation"]["ppo"]
    assert release["device"] == ppo["device"] and release["steps_to_target"] == ppo["steps_to_target"]
    assert release["sps"] == round(ppo["sps_end_to_end"])


def test_pushed_image_has_exactly_the_validated_layers(docker, run_result):
    validated = docker.images.get(run_result.validated_id).attrs["RootFS"]["Layers"]
    assert docker.images.get(run_result.stamped_id).attrs["RootFS"]["Layers"] == validated


def test_report_holds_smoke_checks_and_ppo_result(report, variant):
    checks = report["validation"]["smoke"]["checks"]
    assert checks and all(c["status"] in ("pass", "skip") for c in checks)
    assert report["validation"]["ppo"]["solved"] is True
    assert report["validation"]["ppo"]["final_mean_return"] >= variant.ppo_gate.target_return


def test_tags_name_torch_cuda_python_and_revision(run_result, variant):
    immutable = run_result.tags[0].rsplit(":", 1)[1]
    cu = "cu" + variant.cuda.replace(".", "")
    assert immutable.startswith(f"{variant.torch}-{cu}-py{variant.python}-")
    assert {t.rsplit(":", 1)[1] for t in run_result.tags[1:]} == {variant.name, "latest"}  # the moving tag is the variant's name


def test_every_tag_names_the_validated_image(docker, run_result):
    for ref in run_result.tags:
        assert docker.images.get(ref).id == run_result.stamped_id


def test_label_says_gpu_validation_false(docker, run_result):
    assert docker.images.get(run_result.stamped_id).labels["io.proven-torch.gpu-validated"] == "false"


@pytest.mark.parametrize(
    "key",
    [
        "org.opencontainers.image.source",
        "org.opencontainers.image.revision",
        "org.opencontainers.image.version",
        "org.opencontainers.image.created",
        "org.opencontainers.image.title",
        "org.opencontainers.image.description",
        "org.opencontainers.image.licenses",
    ],
)
def test_oci_label_present(docker, run_result, key):
    value = docker.images.get(run_result.stamped_id).labels.get(key)
    assert value and value != "unknown"


def test_version_labels_match_the_image(docker, run_result, report):
    labels = docker.images.get(run_result.stamped_id).labels
    facts = report["validation"]["smoke"]["facts"]
    assert labels["io.proven-torch.torch"] == facts["torch_release"]
    assert labels["io.proven-torch.cuda"] == facts["cuda"]
    assert labels["io.proven-torch.cudnn"] == str(facts["cudnn"])
    assert labels["org.opencontainers.image.version"] == run_result.tags[0].rsplit(":", 1)[1]


def test_validation_label_carries_the_report_digest(docker, run_result):
    import hashlib

    labels = docker.images.get(run_result.stamped_id).labels
    record = (run_result.report_path.parent / "validation.json").read_bytes()
    assert labels["io.proven-torch.validation"] == "passed"
    assert labels["io.proven-torch.validation-sha256"] == hashlib.sha256(record).hexdigest()


def test_registry_holds_exactly_the_tested_image(run_result):
    """The manifest in the registry points at the tagged image's config (= its ID)."""
    for ref, digest in run_result.pushed.items():
        resp = registry_manifest(ref)
        assert resp.status_code == 200
        assert resp.headers["Docker-Content-Digest"] == digest
        assert resp.json()["config"]["digest"] == run_result.stamped_id


# --- bad images are never tagged -------------------------------------------------


def _derive(docker, base: str, run: str) -> str:
    user = load_matrix()
    dockerfile = f"FROM {base}\nUSER 0\nRUN {run}\nUSER {user.uid}:{user.gid}\n"
    image, _ = docker.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), rm=True, forcerm=True, labels={"io.proven-torch.role": "test"}
    )
    return image.id


def _target(variant, tmp_path, ref="proven-torch-test-bad"):
    return Target(variant=variant, run_dir=tmp_path, ref=ref, date="20000101", created="test", revision="test", ca_cert=ca_cert())


def _assert_refused(docker, image_id, variant, tmp_path, match):
    before = set(docker.images.get(image_id).tags)
    with pytest.raises(ValidationFailed, match=match):
        validate_and_tag(docker, image_id, 0, _target(variant, tmp_path))
    assert set(docker.images.get(image_id).tags) == before
    assert json.loads((tmp_path / "report.json").read_text())["status"] == "failed"


def test_image_without_torch_fails_validation_and_is_not_tagged(docker, image, variant, tmp_path):
    broken = _derive(docker, image, "rm -rf /opt/venv/lib/python*/site-packages/torch")
    try:
        _assert_refused(docker, broken, variant, tmp_path, "torch does not import")
        assert docker.images.get(broken).tags == []
    finally:
        docker.images.remove(broken, force=True)


def test_pin_mismatch_fails_validation_and_is_not_tagged(docker, image, variant, tmp_path):
    _assert_refused(
        docker, image, dataclasses.replace(variant, nccl="0.0.1"), tmp_path, "spec differs from images/variants.toml in nccl"
    )


def test_label_mismatch_fails_validation_and_is_not_tagged(docker, image, variant, tmp_path):
    relabelled, _ = docker.images.build(
        fileobj=io.BytesIO(f'FROM {image}\nLABEL io.proven-torch.torch="0.0.1"\n'.encode()),
        rm=True,
        labels={"io.proven-torch.role": "test"},
    )
    try:
        _assert_refused(docker, relabelled.id, variant, tmp_path, "labels do not match.*io.proven-torch.torch")
    finally:
        docker.images.remove(relabelled.id, force=True)


def test_over_budget_image_fails_validation_and_is_not_tagged(docker, image, variant, tmp_path):
    _assert_refused(
        docker, image, dataclasses.replace(variant, size_budget_gb=1.0), tmp_path, f"over the {variant.name} budget of 1.0 GB"
    )


@pytest.mark.parametrize(
    ("plant", "what"),
    [
        (
            "mkdir -p /home/user/.ssh && printf -- '-----BEGIN OPENSSH PRIVATE KEY-----\\n%s\\n' "
            "$(head -c 120 /dev/urandom | base64 -w0) > /home/user/.ssh/id_ed25519",
            "SSH private key",
        ),
        ("mkdir -p /opt/app/.git && touch /opt/app/.git/config", ".git folder"),
        ("echo 'token ghp_0123456789abcdefghijABCDEFGHIJ012345' > /opt/notes.txt", "access token"),
    ],
)
def test_planted_secret_fails_validation_and_is_not_tagged(docker, image, variant, tmp_path, plant, what):
    planted = _derive(docker, image, plant)
    try:
        _assert_refused(docker, planted, variant, tmp_path, "hygiene scan found")
        report = json.loads((tmp_path / "report.json").read_text())
        assert any(what in finding for finding in report["validation"]["hygiene"])
    finally:
        docker.images.remove(planted, force=True)


# --- registries that cannot take the push ------------------------------------------


def test_unreachable_registry_is_one_clear_error(docker, image):
    ref = "127.0.0.1:1/proven-torch-test"
    docker.images.get(image).tag(ref, "unreachable")
    try:
        with pytest.raises(PushFailed) as err:
            push.push_tag(docker, image, ref, "unreachable")
        assert "127.0.0.1:1" in str(err.value) and "\n" not in str(err.value)
    finally:
        docker.images.remove(f"{ref}:unreachable")


def test_push_refuses_a_tag_that_moved_to_another_image(docker, image):
    ref = f"{REGISTRY}/proven-torch-test"
    other = docker.images.get("debian:bookworm-slim")
    other.tag(ref, "moved")
    try:
        with pytest.raises(PushFailed, match="not the validated"):
            push.push_tag(docker, image, ref, "moved")
    finally:
        docker.images.remove(f"{ref}:moved")


# --- build.py as a user runs it -------------------------------------------------------


def _build_py(*args) -> list[str]:
    ca = ca_cert()
    return [sys.executable, str(REPO_ROOT / "build.py"), *args, *(["--ca-cert", str(ca)] if ca else [])]


def test_a_line_behind_an_unreachable_index_is_refused_at_once_naming_what_builds_here(docker, matrix, tmp_path):
    """The 2.5-cu121 line needs PyTorch's index. Where this host cannot reach it (these build machines),
    build.py refuses before any build step, exit 4, one line that names the CUDA 12.1 line PyPI
    alone builds; where it can, the probe lets the build go on (decided from the host's real reach)."""
    from pipeline.build_image import check_index_reach, index_unreachable
    from pipeline.variants import pypi_alternatives

    behind = resolve(matrix, "12.1", "2.5")
    if index_unreachable(behind.index, ca_cert()) is None:
        check_index_reach(matrix, behind, ca_cert())  # reachable: no refusal (the build itself is not run here)
        return
    start = time.monotonic()
    result = subprocess.run(
        _build_py("--cuda", "12.1", "--torch", "2.5", "--report-dir", str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 4, result.stderr
    assert time.monotonic() - start < 120  # refused, not built
    assert behind.note in result.stdout and "==> build " not in result.stdout
    last = result.stderr.strip().splitlines()
    assert len(last) == 1 and last[0].startswith("build.py: network error") and "download.pytorch.org" in last[0]
    pypi_line = resolve(matrix, "12.1")
    assert pypi_line.uses_pypi and pypi_alternatives(matrix, behind) in last[0] and pypi_line.name in last[0]


def _start_in_a_terminal(argv: list[str]) -> subprocess.Popen:
    """build.py as a terminal starts it, in a process group of its own that a test can send Ctrl-C to."""
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


TEST_REPOS = re.compile(r"^(?:[^/]+/)?proven-torch-test")  # scripts/ci-cleanup.sh's pattern


def own_tags(docker) -> set[str]:
    """Every tag on the daemon but the test repositories' (the `beside` tests tag small images meanwhile):
    what build.py tags is the line's own repository (proven-torch), which this keeps. One call: images looked
    up one by one (docker-py's images.list) fail when a `beside` test removes one in between."""
    tags = {t for i in docker.api.images() for t in i.get("RepoTags") or ()}
    return {t for t in tags if t != "<none>:<none>" and not TEST_REPOS.match(t)}


def test_ctrl_c_mid_build_exits_130_and_tags_nothing(docker, image, variant, tmp_path):
    before = own_tags(docker)
    # A terminal's Ctrl-C: the default SIGINT disposition, whatever this test runner inherited (a job
    # started with `&` by a non-interactive shell ignores SIGINT, and so would build.py).
    proc = _start_in_a_terminal(_build_py("--cuda", variant.cuda, "--report-dir", str(tmp_path)))
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        if f"==> build {variant.name}" in line or time.monotonic() > deadline:
            break
    time.sleep(2)  # let docker build get going
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "nothing was tagged" in err
    assert own_tags(docker) == before


def test_ctrl_c_during_build_py_matrix_exits_130_and_starts_no_further_line(docker, image, matrix, variant, tmp_path):
    """`build.py matrix` used to record Ctrl-C as a failed line and start the next one, ending with 5."""
    other = next(v for v in matrix.variants if v.uses_pypi and v.name != variant.name)
    before = own_tags(docker)
    argv = [*_build_py("matrix", "--line", variant.name, "--line", other.name, "--report-dir", str(tmp_path))]
    proc = _start_in_a_terminal(argv)
    seen = []
    deadline = time.monotonic() + 300
    for line in proc.stdout:  # the default line's build is cached: wait until its validation runs
        seen.append(line)
        if "==> proof:" in line or time.monotonic() > deadline:
            break
    time.sleep(2)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    out, err = proc.communicate(timeout=120)
    seen.append(out)
    assert proc.returncode == 130, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"build.py: matrix stopped in {variant.name}: interrupted during"), last
    assert "nothing was pushed" in last
    assert f"==> matrix: {other.name}" not in "".join(seen)
    assert own_tags(docker) == before


def _copy_context(dest):
    """A copy of the build context (the folders .dockerignore lets in) and the Dockerfiles, to change without
    touching the checkout."""
    allowed = [line[1:].rstrip("/") for line in (REPO_ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")]
    for folder in allowed:
        shutil.copytree(REPO_ROOT / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / ".dockerignore", dest)
    for dockerfile in REPO_ROOT.glob("Dockerfile.*"):  # a build of this context reads its own (build_image.build_command)
        shutil.copy(dockerfile, dest)
    return dest


def test_changing_a_project_file_rebuilds_under_10_mb(docker, image, variant, tmp_path):
    """Layer order: a change in smoke/ must not touch the heavy layers."""
    _copy_context(tmp_path)
    with open(tmp_path / "smoke" / "__init__.py", "a") as f:
        f.write("\n# a one-line change\n")
    from pipeline import build_image

    cli = find_build_cli()
    iid = tmp_path / "iid"
    argv = [*cli.argv, "-f", str(dockerfile_path(variant)), "--build-arg", f"TORCH={variant.torch_minor}", "--iidfile", str(iid)]
    for key, value in build_image.build_args(variant, "a-one-line-change", "2026-01-01T00:00:00Z").items():
        argv += ["--build-arg", f"{key}={value}"]  # the image's epochs: a build argument is part of every RUN's cache key
    argv.append(str(tmp_path))
    ca = ca_cert()
    if ca:
        argv[len(cli.argv) : len(cli.argv)] = ["--secret", f"id=pip_ca,src={ca}"]
    subprocess.run(argv, check=True, env=cli.environ(), timeout=900, capture_output=True)
    rebuilt = iid.read_text().strip()
    try:
        old = docker.images.get(image).attrs["RootFS"]["Layers"]
        new = docker.images.get(rebuilt).attrs["RootFS"]["Layers"]
        first_changed = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), len(new))
        assert first_changed < len(new), "the change did not reach the image"
        history = list(reversed(docker.api.history(rebuilt)))  # oldest first
        # The project's own files start with the copy of container/ (the rendering layer before it is Debian's)
        project_start = next(i for i, h in enumerate(history) if "/opt/proven-torch/container/" in h["CreatedBy"])
        project = history[project_start:]
        layer_steps = [h for h in project if h["CreatedBy"].lstrip().startswith(("COPY", "RUN", "WORKDIR", "/bin/bash"))]
        assert len(new) - first_changed <= len(layer_steps), "a layer before the project's own files changed"
        assert sum(int(h["Size"]) for h in project) < 10 * 1024 * 1024
    finally:
        docker.images.remove(rebuilt, force=True)


# --- the human report, as a person sees it ----------------------------------------------


def _chromium(*args: str, tmp_path) -> str:
    exe = need_chromium()
    flags = [*HEADLESS_CHROMIUM, f"--user-data-dir={tmp_path / 'chromium'}"]
    return subprocess.run([exe, *flags, *args], capture_output=True, text=True, timeout=120).stdout


def test_html_report_renders_checks_ppo_and_curve(run_result, tmp_path):
    page = run_result.report_path.with_name("report.html")
    dom = _chromium("--dump-dom", page.as_uri(), tmp_path=tmp_path)
    assert "pushed" in dom and 'id="smoke"' in dom and 'id="ppo"' in dom
    assert dom.count('class="pass"') >= 5
    keyid = json.loads(run_result.report_path.read_text())["push"]["signatures"][0]["keyid"]
    assert f"key <code>{keyid[:16]}…</code>" in dom  # which key signed the pushed digest
    assert 'src="ppo/learning_curve.png"' in dom and (page.parent / "ppo" / "learning_curve.png").stat().st_size > 10_000
    _chromium("--screenshot=" + str(tmp_path / "report.png"), "--window-size=1200,2400", page.as_uri(), tmp_path=tmp_path)
    assert (tmp_path / "report.png").stat().st_size > 50_000


def test_report_index_lists_the_build(run_result, tmp_path):
    from pipeline.html_report import write_index

    index = write_index(run_result.report_path.parent.parent.parent)
    dom = _chromium("--dump-dom", index.as_uri(), tmp_path=tmp_path)
    assert run_result.report_path.parent.name in dom and run_result.report_path.parent.parent.name in dom


def test_sbom_lists_torch_and_openssh(run_result):
    sbom = json.loads(run_result.report_path.with_name("sbom.cdx.json").read_text())
    purls = {c.get("purl", "") for c in sbom["components"]}
    assert any(p.startswith("pkg:pypi/torch@") for p in purls)
    assert any(p.startswith("pkg:deb/debian/openssh-server@") for p in purls)


def test_audit_runs_against_the_committed_snapshot(report, run_result, variant, tmp_path):
    from pipeline.validation.advisories import load_snapshot

    result, snapshot = report["validation"]["audit"], load_snapshot()
    assert result["status"] == "pass" and result["failing"] == []
    # the 2.9 line's two high advisories in torch, accepted on purpose, each with its reason
    assert sorted(f["id"] for f in result["allowed"]) == ["PYSEC-2026-139", "PYSEC-2026-2286"]
    assert all(f["package"] == "torch" and f["reason"] and f["fixed"] for f in result["allowed"])
    assert result["stale"] == (result["age_days"] > 90)
    assert result["records"] == len(snapshot.records) and result["as_of"] == snapshot.as_of.isoformat()
    assert result["packages"] > 100  # every Python package in the image, not only the pins
    # nothing skipped for being hard to read: torch's tagged releases (2.6.0-cu124) were read by the rule
    assert "PYSEC-2025-189" in {r["id"] for r in result["read_by_rule"]} and result["read_by_rule_records"] >= 1
    assert result["unreadable_records"] == len({r["id"] for r in result["unreadable"]})
    # what build.py list, the README and proof disclose is this gate's finding set (the line's whole lock)
    spec = json.loads(spec_path(variant).read_text())["advisories"]
    assert sorted((r["id"], r["package"]) for r in spec["carried"]) == sorted(
        (f["id"], f["package"]) for f in result["findings"] + result["allowed"]
    )
    dom = _chromium("--dump-dom", run_result.report_path.with_name("report.html").as_uri(), tmp_path=tmp_path)
    assert 'id="audit"' in dom and snapshot.as_of.isoformat() in dom and "PYSEC-2026-2286" in dom
    assert ("stale" in dom) == result["stale"]


def test_the_image_label_names_the_accepted_advisories(docker, run_result, report):
    label = docker.images.get(run_result.stamped_id).labels["io.proven-torch.advisories"]
    assert label == f"PYSEC-2026-139 HIGH, PYSEC-2026-2286 HIGH (advisory data as of {report['validation']['audit']['as_of']})"


def test_high_advisory_fails_validation_and_allowlist_lets_it_pass(docker, image, variant, tmp_path):
    """A fixture OSV record against the image's tqdm: refused; allowlisted: it passes the audit stage."""
    from pipeline.validation import audit as audit_mod
    from pipeline.validation.gate import Findings, Request, sbom_and_audit

    db = tmp_path / "osv"
    db.mkdir()
    version = dict(variant.packages)["tqdm"]
    record = {
        "id": "GHSA-test-0000-0000",
        "aliases": ["CVE-0000-0001"],
        "summary": "fixture advisory",
        "affected": [{"package": {"ecosystem": "PyPI", "name": "tqdm"}, "versions": [version]}],
        "database_specific": {"severity": "HIGH"},
    }
    (db / "GHSA-test.json").write_text(json.dumps(record))
    target = dataclasses.replace(_target(variant, tmp_path / "run"), advisories=db)
    (tmp_path / "run").mkdir()
    before = set(docker.images.get(image).tags)
    with pytest.raises(ValidationFailed, match="GHSA-test-0000-0000"):
        validate_and_tag(docker, image, 0, target)
    assert set(docker.images.get(image).tags) == before
    allow = [
        audit_mod.Allowed(id="CVE-0000-0001", package="tqdm", reason="fixture", expires=__import__("datetime").date(2099, 1, 1))
    ]
    packages = [{"name": "tqdm", "version": version}]
    assert audit_mod.audit(packages, [record], allow)["status"] == "pass"
    found = Findings()
    failures = sbom_and_audit(Request(docker, image, 0, target), found)
    assert found.audit["status"] == "fail" and failures


def test_tampered_lock_hash_fails_the_build_with_a_clear_message(docker, image, matrix, variant, tmp_path):
    """Only the last lock layer changes, so the CUDA layers come from the cache the session's build filled
    (`image`: after it, in the image group; the same epochs as the image's own build: they are build arguments)."""

    from pipeline import build_image
    from pipeline.errors import BuildFailed
    from pipeline.lock import lock_dir

    context = _copy_context(tmp_path / "ctx")
    lock = lock_dir(variant, context / "images" / "locks") / "4-packages.txt"
    text = lock.read_text()
    block = re.search(r"^tqdm==.*?(?=^\S)", text, re.M | re.S).group(0)
    lock.write_text(text.replace(block, re.sub(r"sha256:[0-9a-f]{64}", "sha256:" + "0" * 64, block)))
    with pytest.raises(BuildFailed, match="did not match the hash in the lock file"):
        args = build_image.build_args(variant, "tampered", "2026-01-01T00:00:00Z")
        build = build_image.Build(variant, tmp_path / "out", args, ca_cert=ca_cert(), context=context)
        build_image.build_image(docker, find_build_cli(), matrix, build)


def test_registry_refusing_the_push_is_one_clear_error(docker, image, readonly_registry):
    ref = f"{readonly_registry}/proven-torch-test"
    docker.images.get(image).tag(ref, "readonly")
    try:
        with pytest.raises(PushFailed) as err:
            push.push_tag(docker, image, ref, "readonly")
        assert "refused" in str(err.value) or "cannot push" in str(err.value)
        assert "\n" not in str(err.value)
    finally:
        docker.images.remove(f"{ref}:readonly")


def validation_of(report: dict, run_result, folder) -> Validation:
    """The session run's validation as a Validation (what stamping hands the push), its SBOM copied to `folder`."""
    v = report["validation"]
    shutil.copy(run_result.report_path.with_name(v["sbom"]["file"]), folder / v["sbom"]["file"])
    return Validation(
        ok=v["ok"],
        gpu=v["gpu"],
        seconds=v["seconds"],
        failures=tuple(v["failures"]),
        hygiene=tuple(v["hygiene"]),
        stages=tuple((s["name"], s["status"]) for s in v["stages"]),
        size=v["size"],
        sbom=v["sbom"],
        audit=v["audit"],
        proof={**v["proof"], "smoke": v["smoke"], "ppo": v["ppo"]},
        ran_in=v.get("ran_in", ""),
    )


def test_held_moving_tags_are_not_pushed_and_are_recorded(docker, run_result, report, tmp_path):
    """--hold-moving-tags (the release workflow): only the immutable tag reaches the registry; the
    moving ones wait in the report for a GPU proof of the pushed digest."""
    from pipeline.publish import publish
    from pipeline.target import Tagged
    from tests.records import build_request

    validation = validation_of(report, run_result, tmp_path)
    variant = next(v for v in load_matrix().variants if v.is_default)
    ref = f"{REGISTRY}/proven-torch-test-held"
    tags = [f"held-{os.getpid()}-immutable", f"held-{os.getpid()}-moving", f"held-{os.getpid()}-latest"]
    tagged = Tagged(validated_id=run_result.validated_id, stamped_id=run_result.stamped_id, tags=tags, validation=validation)
    push.tag_image(docker, run_result.stamped_id, ref, tags)
    try:
        pushed = publish(docker, tagged, _target(variant, tmp_path, ref), *build_request(hold_moving_tags=True))
        assert list(pushed.refs) == [f"{ref}:{tags[0]}"] and pushed.held_tags == tuple(tags[1:])
        assert registry_manifest(f"{ref}:{tags[0]}").json()["config"]["digest"] == run_result.stamped_id
        for tag in tags[1:]:
            assert registry_manifest(f"{ref}:{tag}").status_code == 404, tag
        written = json.loads((tmp_path / "report.json").read_text())
        assert written["status"] == "pushed" and written["push"]["held_tags"] == tags[1:]
    finally:
        for tag in tags:
            docker.images.remove(f"{ref}:{tag}")


@contextlib.contextmanager
def signed_push(docker, run_result, sign_keys, tmp_path, validation: Validation, name: str):
    """The session's stamped image handed to publish with `validation` and the session's key, under
    REGISTRY/proven-torch-test-NAME: yields (the push to make, the image's ref:tag); the local tag removed after."""
    from pipeline.attest import KeySource
    from pipeline.publish import publish
    from pipeline.target import Tagged
    from tests.records import build_request

    variant = next(v for v in load_matrix().variants if v.is_default)
    ref, tag = f"{REGISTRY}/proven-torch-test-{name}", f"{name}-{os.getpid()}"
    tagged = Tagged(validated_id=run_result.validated_id, stamped_id=run_result.stamped_id, tags=[tag], validation=validation)
    request, facts = build_request(sign_key=KeySource(sign_keys["private"], sign_keys["passphrase"]))
    push.tag_image(docker, run_result.stamped_id, ref, [tag])
    try:
        yield (lambda: publish(docker, tagged, _target(variant, tmp_path, ref), request, facts)), f"{ref}:{tag}"
    finally:
        docker.images.remove(f"{ref}:{tag}")


def test_the_push_signs_the_stamped_validation_record_not_the_file_changed_since(docker, run_result, report, sign_keys, tmp_path):
    """Between stamping and the push's signing, validation.json in the report folder is made a GPU pass: the
    signed test result is still the stamped record's (a CPU-only run's), which verify then shows."""
    from pipeline import verify

    validation = validation_of(report, run_result, tmp_path)
    assert not validation.gpu  # this host has no GPU: a GPU pass is what an attacker would write
    forged = {**json.loads(validation.record()), "gpu": True, "validated_on": "linux/amd64: validated on a GPU"}
    (tmp_path / "validation.json").write_text(json.dumps(forged))
    with signed_push(docker, run_result, sign_keys, tmp_path, validation, "swapped") as (push_it, image):
        push_it()
        record = verify.verify(image, sign_keys["public"], verify.Policy())
    assert record["images"][0]["test_result"]["validated_on"] == validation.validated_on
    assert "validated on the CPU only" in validation.validated_on


def test_a_validation_record_that_is_not_the_stamped_one_is_neither_pushed_nor_signed(
    docker, run_result, report, sign_keys, tmp_path
):
    """The push signs only the record the image carries the hash of (its stamped label): another one (here a
    GPU pass the CPU run never made) is refused before anything is pushed."""
    from pipeline.errors import NotVerified

    validation = dataclasses.replace(validation_of(report, run_result, tmp_path), gpu=True)
    with signed_push(docker, run_result, sign_keys, tmp_path, validation, "unstamped") as (push_it, image):
        with pytest.raises(NotVerified, match="not the one the image was stamped with: nothing pushed or signed"):
            push_it()
    assert registry_manifest(image).status_code == 404
    assert "not the one the image was stamped with" in json.loads((tmp_path / "report.json").read_text())["error"]
