"""Rendering, tags, failure messages and build.py's exit codes — no Docker needed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.build_image import Build, build_command, classify_failure
from pipeline.docker_env import BuildCli
from pipeline.errors import UsageError, ValidationFailed
from pipeline.render import HEADER, build_arg, dockerfile_path, render, stale_files
from pipeline.request import Request, check_request
from pipeline.stamp import compute_tags
from pipeline.target import image_ref
from pipeline.validation import audit
from pipeline.variants import REPO_ROOT, load_matrix, resolve

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def cu128(matrix):
    return resolve(matrix, "12.8")


# --- rendering ---------------------------------------------------------------


def test_committed_dockerfiles_are_not_stale(matrix):
    assert stale_files(matrix, audit.disclosures(matrix.every_variant())) == []


@pytest.mark.parametrize("name", [v.name for v in load_matrix().variants])
def test_each_variant_is_built_by_its_cuda_lines_top_level_dockerfile(matrix, name):
    variant = matrix.by_name(name)
    path = dockerfile_path(variant)
    assert path.parent == REPO_ROOT and path.name == "Dockerfile.cu" + variant.cuda.replace(".", "")
    text = path.read_text()
    assert text.startswith(HEADER) and f"FROM os AS torch-{variant.torch_minor}\n" in text
    assert build_arg(variant) == {"TORCH": variant.torch_minor}
    first = resolve(matrix, variant.cuda)  # what --cuda alone builds is the file's default
    assert re.search(rf"^ARG TORCH={re.escape(first.torch_minor)}$", text, re.M)


def test_the_design_names_dockerfile_cu118_and_cu121_and_no_per_variant_file_is_left():
    assert (REPO_ROOT / "Dockerfile.cu118").is_file() and (REPO_ROOT / "Dockerfile.cu121").is_file()
    expected = {dockerfile_path(v).name for v in load_matrix().every_variant()}
    assert {p.name for p in REPO_ROOT.glob("Dockerfile.*")} == expected


def test_rendered_dockerfile_pins_the_variant(matrix):
    cu118 = resolve(matrix, "11.8")
    text = render(matrix, cu118)
    assert f'"torch=={cu118.torch}"' in text and f'"torchvision=={cu118.torchvision}"' in text
    assert f"--index-url {cu118.index}" in text
    assert "{{" not in text


def test_rendered_dockerfile_sets_nvidia_variables(matrix, cu128):
    text = render(matrix, cu128)
    assert "NVIDIA_VISIBLE_DEVICES=all" in text
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics" in text  # graphics: the driver's EGL for MuJoCo
    assert 'NVIDIA_REQUIRE_CUDA="cuda>=12.0"' in text


def test_no_secret_enters_a_layer(matrix, cu128):
    text = render(matrix, cu128)
    assert "--mount=type=secret,id=pip_ca" in text
    assert not re.search(r"^(COPY|ADD)\b.*(\.crt|\.pem|secret)", text, re.M)
    assert "/etc/ssh/ssh_host_" in text  # host keys of the package removed in the same RUN


def test_project_files_come_after_every_pip_layer(matrix, cu128):
    lines = render(matrix, cu128).splitlines()
    last_pip = max(i for i, line in enumerate(lines) if "pip install" in line)
    first_copy = min(i for i, line in enumerate(lines) if "/mnt/container" in line)  # copied from the mounted context
    assert first_copy > last_pip


def test_drift_is_detected(tmp_path, matrix, cu128):
    (tmp_path / "Dockerfile.cu128").write_text(render(matrix, cu128) + "\n# edited by hand\n")
    stale = {p.name for p in stale_files(matrix, audit.disclosures(matrix.every_variant()), root=tmp_path)}
    assert "Dockerfile.cu128" in stale and "Dockerfile.cu118" in stale  # edited and missing


def test_unknown_placeholder_fails(matrix, cu128):
    with pytest.raises(KeyError, match="NOPE"):
        render(matrix, cu128, template="FROM {{NOPE}}")


# --- one source of truth -----------------------------------------------------

# Where a pin of the matrix must never be written down again: the code, the
# tests and the host tools. Tests take pins from load_matrix(), never from literal
# copies of it; their made-up fixtures use versions no matrix line carries.
# requirements-dev.txt holds none either: a host tool that must match the image
# (gymnasium) takes its version from the matrix. The one exception is
# smoke/rules.py's table of NVIDIA's driver floors, an upstream fact the matrix
# is checked against (test_pipeline_variants.test_driver_floors_are_nvidias).
_CODE_DIRS = (
    "pipeline",
    "common",
    "smoke",
    "ppo_bench",
    "rlhf_bench",
    "notebooks",
    "container",
    "scripts",
    "tests",
    ".ci",
    ".github",
)
_CODE_FILES = ("Makefile", "build.py", ".dockerignore", ".hadolint.yaml", "pytest.ini", "requirements-dev.txt")
_UPSTREAM_TABLES = {"smoke/rules.py": "CUDA_MAJOR_MIN_DRIVER"}


def _matrix_pins() -> set[str]:
    matrix = load_matrix()
    pins = {version for _, version in matrix.packages}
    pins |= {version for flavor in matrix.flavors for _, version in flavor.packages}
    for v in matrix.variants:
        pins |= {v.torch, v.torchvision, v.torchaudio, str(v.cudnn), v.nccl, v.min_driver}
    return pins


def _pin_files():
    for folder in _CODE_DIRS:
        for path in sorted((REPO_ROOT / folder).rglob("*")):
            if (
                path.is_file()
                and path.suffix in {".py", ".sh", ".yml", ".yaml", ".conf", ".ipynb", ""}
                and "__pycache__" not in path.parts
            ):
                yield path
    yield from (REPO_ROOT / name for name in _CODE_FILES)


def test_no_version_pin_outside_the_matrix():
    """Every pin of the matrix, read from the matrix (so the check follows each bump)."""
    pins = _matrix_pins()
    offenders = []
    for path in _pin_files():
        text = path.read_text(errors="replace")
        rel = str(path.relative_to(REPO_ROOT))
        if rel in _UPSTREAM_TABLES:
            name = _UPSTREAM_TABLES[rel]
            text = re.sub(rf"^{name} = .*$", "", text, flags=re.M)
        offenders += [f"{rel}: {pin}" for pin in sorted(pins) if re.search(rf"(?<![\d.]){re.escape(pin)}(?![\d.])", text)]
    assert offenders == []


# --- tags --------------------------------------------------------------------


def _smoke(variant, **facts):
    base = {
        "torch_release": variant.torch,
        "torch": f"{variant.torch}+{variant.name}",
        "cuda": variant.cuda,
        "python": variant.python + ".2",
    }
    return {"facts": {**base, **facts}}


def test_tags_come_from_the_image(cu128):
    immutable, moving = compute_tags(cu128, _smoke(cu128), "20261203", "abc1234")
    assert immutable == f"{cu128.torch}-cu128-py{cu128.python}-20261203-abc1234"
    assert moving == [f"{cu128.torch_minor}-cu128", "latest"]


def test_only_the_default_variant_moves_latest(matrix):
    cu126 = resolve(matrix, "12.6")
    _, moving = compute_tags(cu126, _smoke(cu126), "20261203", "abc1234")
    assert moving == [f"{cu126.torch_minor}-cu126"]


@pytest.mark.parametrize(
    ("facts", "what"),
    [
        ({"torch_release": "0.0.1"}, "torch 0.0.1"),
        ({"cuda": "12.6"}, "CUDA 12.6"),
        ({"python": "3.99.1"}, "Python 3.99"),
        ({"cuda": None}, "CUDA unknown"),
    ],
)
def test_tag_refused_when_image_differs_from_pins(cu128, facts, what):
    with pytest.raises(ValidationFailed, match=re.escape(what)):
        compute_tags(cu128, _smoke(cu128, **facts), "20261203", "abc1234")


def test_image_ref():
    assert image_ref("proven-torch", "localhost:5000/") == "localhost:5000/proven-torch"
    assert image_ref("proven-torch", None) == "proven-torch"


# --- build command and failures ----------------------------------------------


def test_build_command_passes_ca_as_secret_and_no_tag(cu128, tmp_path):
    cli = BuildCli(("/usr/bin/docker", "build"), (("DOCKER_BUILDKIT", "1"),), "test")
    build = Build(cu128, tmp_path, {"REVISION": "abc"}, ca_cert=Path("/etc/ssl/ca.pem"))
    argv = build_command(cli, build, tmp_path / "iid")
    assert argv[argv.index("--secret") + 1] == "id=pip_ca,src=/etc/ssl/ca.pem"
    assert "-t" not in argv and "--tag" not in argv and "--no-cache" not in argv
    assert argv[argv.index("-f") + 1] == str(dockerfile_path(cu128))
    elsewhere = build_command(cli, Build(cu128, tmp_path, {}, context=tmp_path / "src", no_cache=True), tmp_path / "iid")
    assert elsewhere[elsewhere.index("-f") + 1] == str(dockerfile_path(cu128, tmp_path / "src"))  # a rebuild's checkout's own
    assert "--no-cache" in elsewhere and elsewhere[-1] == str(tmp_path / "src")
    assert f"TORCH={cu128.torch_minor}" in argv and argv[argv.index(f"TORCH={cu128.torch_minor}") - 1] == "--build-arg"


def test_network_failure_names_the_index(matrix, tmp_path):
    cu118 = resolve(matrix, "11.8")
    log = (
        "WARNING: Retrying ... NewConnectionError('Failed to establish a new connection')\n"
        f"ERROR: No matching distribution found for torch=={cu118.torch}"
    )
    message = classify_failure(log, cu118, tmp_path / "build.log")
    assert message.startswith(f"network error: could not download torch {cu118.torch} for CUDA 11.8 from PyTorch's wheel index")
    assert "download.pytorch.org" in message and "\n" not in message


def test_tls_failure_suggests_ca_cert(cu128, tmp_path):
    message = classify_failure(
        "SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED]", cu128, tmp_path / "b.log"
    )
    assert "--ca-cert" in message


def test_other_failure_names_the_step(cu128, tmp_path):
    log = "#7 [stage-0 3/9] RUN useradd --uid 1000\n#7 ERROR: process did not complete\n"
    assert "RUN useradd" in classify_failure(log, cu128, tmp_path / "b.log")


# --- push policy ----------------------------------------------------------------


def test_push_without_gpu_needs_explicit_consent(matrix, cu128):
    config = Request(matrix=matrix, variant=cu128, push=True)
    with pytest.raises(UsageError, match="--allow-cpu-validation"):
        check_request(config, gpus=0)
    check_request(Request(matrix=matrix, variant=cu128, push=True, allow_cpu_validation=True), gpus=0)
    check_request(config, gpus=2)


@pytest.mark.parametrize(
    ("registry", "repo"), [("127.0.0.1:5055@192.0.2.2", "proven-torch"), ("localhost:5000", "Proven/../x"), ("h.example#x", "r")]
)
def test_a_registry_or_repo_outside_the_reference_grammar_is_refused_before_the_build(matrix, cu128, registry, repo):
    config = Request(matrix=matrix, variant=cu128, push=True, registry=registry, repo=repo, allow_cpu_validation=True)
    with pytest.raises(UsageError, match="not an image reference|not a registry host"):
        check_request(config, gpus=0)


# --- the CLI, end to end, as a user runs it ----------------------------------------


def _cli(*args, env=None):
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "build.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
    )


def test_help_explains_every_flag():
    out = _cli("--help").stdout
    for flag in (
        "--cuda",
        "--torch",
        "--push",
        "--hold-moving-tags",
        "--registry",
        "--repo",
        "--ca-cert",
        "--allow-cpu-validation",
    ):
        assert flag in out
    assert "exit codes:" in out


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (("--cuda", "12.1", "--torch", "2.9"), 2, "torch 2.9 has no CUDA 12.1 build"),
        (("--cuda", "9.9"), 2, "unknown CUDA line 9.9"),
        (("--ca-cert", "/nonexistent/ca.pem"), 2, "--ca-cert /nonexistent/ca.pem: no such file"),
        (("--push",), 2, "--allow-cpu-validation"),
        (("--bogus",), 2, "unrecognized arguments"),
        (("list", "--push"), 2, "build.py list: --push is a flag of `build.py build`, not of `list`"),
        (("render", "--cuda", "12.8"), 2, "--cuda is a flag of `build.py build` and `build.py lock`, not of `render`"),
        (("matrix", "--line", "9.9-cu999"), 2, "unknown variant '9.9-cu999'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, code, text):
    result = _cli(*args)
    assert result.returncode == code, result.stderr
    assert text in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_malformed_matrix_exit_2(tmp_path):
    bad = tmp_path / "m.toml"
    bad.write_text("not = [valid")
    result = _cli("--matrix", str(bad), "list")
    assert result.returncode == 2 and "not valid TOML" in result.stderr


def test_unreachable_docker_exit_3(tmp_path):
    result = _cli("--cuda", "12.8", env={"DOCKER_HOST": f"unix://{tmp_path}/no.sock"})
    assert result.returncode == 3, result.stderr
    assert "cannot reach the Docker daemon" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_render_check_passes_on_a_clean_checkout():
    result = _cli("render", "--check")
    assert result.returncode == 0, result.stderr


def test_readme_variant_table_is_the_matrix(matrix):
    from pipeline.listing import variant_table_markdown

    readme = (REPO_ROOT / "README.md").read_text()
    block = readme.split("<!-- variant-table", 1)[1].split("-->", 1)[1].split("<!-- /variant-table -->", 1)[0]
    assert block.strip() == variant_table_markdown(matrix)


# --- the baked spec -----------------------------------------------------------------


def test_the_rendered_spec_is_accepted_and_a_changed_one_is_named(cu128):
    import json

    from pipeline.render import render_spec
    from pipeline.validation import audit
    from pipeline.validation.gate import spec_problem

    spec = render_spec(cu128, audit.disclosures([cu128])[cu128.name])
    assert spec_problem(spec.encode(), cu128) is None
    changed = json.loads(spec)
    changed["expect"]["nccl"] = "0.0.1"
    changed["ppo_gate"]["target_return"] = 1.0
    assert spec_problem(json.dumps(changed).encode(), cu128) == (
        "the image's spec differs from images/variants.toml in nccl, ppo_gate: rebuild after `python build.py render`"
    )
    assert "has no /opt/proven-torch/expect.json" in spec_problem(None, cu128)


# --- layer names in the report ----------------------------------------------------------


def test_largest_layers_are_named_by_what_they_install():
    from pipeline.validation.size import layer_name

    pip = "RUN /bin/bash -o pipefail -c pip install --no-deps --require-hashes -r /opt/proven-torch/lock/3-torch.txt # buildkit"
    apt = "RUN apt-get update  && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends  ca-certificates python3 gcc  && rm -rf /x"
    assert layer_name(pip) == "Python: torch and triton (3-torch.txt)"
    assert layer_name(apt) == "OS packages: ca-certificates, python3, gcc"
    assert layer_name("COPY smoke/ /opt/proven-torch/smoke/ # buildkit") == "project files: smoke/"
    assert layer_name("") == "base image"


def test_holding_moving_tags_needs_a_push(matrix, cu128):
    with pytest.raises(UsageError, match="--hold-moving-tags is only used with --push"):
        check_request(Request(matrix=matrix, variant=cu128, hold_moving_tags=True), gpus=0)
    check_request(Request(matrix=matrix, variant=cu128, push=True, hold_moving_tags=True, allow_cpu_validation=True), gpus=0)


def test_the_index_probe_tells_a_closed_port_from_one_that_answers():
    """Real sockets on 127.0.0.1: a port nobody listens on is unreachable (the build is refused at
    once); a server that answers, even with 404, is reachable (the build goes on)."""
    import http.server
    import threading

    from common.procs import free_port
    from pipeline.build_image import index_unreachable

    closed = free_port()
    assert "refused" in index_unreachable(f"http://127.0.0.1:{closed}/simple", None, timeout=5).lower()
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert index_unreachable(f"http://127.0.0.1:{server.server_port}/no-such-index", None, timeout=5) is None
    finally:
        server.shutdown()
        server.server_close()


def test_build_is_the_default_command_and_help_names_every_command():
    from build import COMMANDS, _with_command

    assert _with_command(["--cuda", "12.1", "--push"]) == ["build", "--cuda", "12.1", "--push"]
    assert _with_command(["--matrix", "m.toml", "list"]) == ["--matrix", "m.toml", "list"]
    assert _with_command([]) == ["build"]
    out = _cli("--help").stdout
    assert all(f"  {name} " in out for name in COMMANDS)


def test_the_matrix_summary_is_one_row_per_line_with_what_it_measured():
    from pipeline.all_lines import LineResult, markdown

    rows = [
        LineResult(
            "9.8-cu991",
            "9.8.1",
            "99.1",
            "PyPI alone",
            "proven (CPU only)",
            size_gb=7.8,
            build_seconds=250.0,
            proof_seconds=41.8,
            ppo_gate_seconds=5.4,
            advisories="2 high (high and critical accepted)",
        ),
        LineResult("9.7-cu992", "9.7.1", "99.2", "PyTorch's index (x/y) and PyPI", "not buildable here", detail="x unreachable"),
    ]
    text = markdown(rows, "Some CPU, 2 cores", "2099-01-01").splitlines()
    assert text[0].startswith("Matrix run on Some CPU, 2 cores, 2099-01-01")
    assert "| 9.8-cu991 | 9.8.1 | 99.1 | PyPI alone | proven (CPU only) | 7.8 | 250.0 | 41.8 | 5.4 | 2 high" in text[4]
    assert text[5].startswith("| 9.7-cu992 |") and "not buildable here: x unreachable | - | - | - | - | - |" in text[5]


def test_a_written_report_keeps_every_field_and_pin_of_the_committed_example(tmp_path, matrix):
    """report.json is read by people, jq and the docs' figures: a field or pin dropped from what a build writes
    (docs/examples' report is the default line's, written by an earlier build) fails here."""
    import json

    from pipeline.target import Target, Validation

    line = resolve(matrix, None)  # the default line, whose report the docs' examples hold
    example = json.loads((REPO_ROOT / f"docs/examples/report-{line.name}/report.json").read_text())
    target = Target(line, tmp_path, "proven-torch", "20261206", "2026-12-06T00:00:00Z", "abcdef0")
    target.write_report("sha256:" + "0" * 64, Validation(), "failed", error="a test")
    written = json.loads((tmp_path / "report.json").read_text())
    assert set(example) <= set(written)
    assert set(example["pins"]) <= set(written["pins"])


@pytest.mark.parametrize(
    "exit_code, stdout, answer",
    [(0, "progress\n[1, 2]\n", [1, 2]), (1, "[1, 2]\n", None), (0, "", None), (0, "not json\n", None), (-9, "", None)],
)
def test_a_tool_in_the_image_answers_json_on_its_last_line_or_one_line_of_failure(exit_code, stdout, answer):
    from pipeline.containers import Finished, json_answer

    done = Finished(exit_code, stdout, "Traceback: boom", 1.0, False)
    if answer is not None:
        assert json_answer(done, "the tool") == answer
        return
    with pytest.raises(ValidationFailed, match=rf"^the tool itself failed \(exit {exit_code}\): .*boom$"):
        json_answer(done, "the tool")


def test_a_stage_whose_tool_fails_is_that_stages_failure_and_the_rest_do_not_run(tmp_path, matrix, monkeypatch):
    """A stage that raises ValidationFailed (its tool in the image failed) fails validation like a finding:
    the next stages are "not run", and the caller writes the report (no traceback, nothing tagged)."""
    from pipeline.target import Target
    from pipeline.validation import gate

    def broken(req, found):
        raise ValidationFailed("the SBOM inventory itself failed (exit 1): boom")

    ran = []
    monkeypatch.setattr(
        gate, "STAGES", (("first", lambda req, found: []), ("broken", broken), ("last", lambda *a: ran.append(1)))
    )
    target = Target(resolve(matrix, None), tmp_path, "proven-torch", "20261206", "2026-12-06T00:00:00Z", "abcdef0")
    validation = gate.validate_image(gate.Request(None, "sha256:" + "0" * 64, 0, target))
    assert not validation.ok and validation.failures == ("the SBOM inventory itself failed (exit 1): boom",)
    assert validation.stages == (("first", "pass"), ("broken", "fail"), ("last", "not run")) and not ran
