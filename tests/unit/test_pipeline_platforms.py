"""Platforms: what the matrix says per line, what a build may ask for, when an index may be written."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from pipeline import push, request
from pipeline.errors import MatrixError, PushFailed, UsageError
from pipeline.request import Request, check_platforms, check_request, emulation_problem, host_platform
from pipeline.variants import AMD64, ARM64, MATRIX_PATH, REPO_ROOT, load_matrix

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


def _matrix_with(tmp_path, old: str, new: str):
    text = MATRIX_PATH.read_text()
    assert old in text
    path = tmp_path / "variants.toml"
    path.write_text(text.replace(old, new, 1))
    return load_matrix(path)


def test_the_multi_arch_lines_are_those_whose_pypi_wheel_has_cuda_on_aarch64(matrix):
    multi = [v for v in matrix.variants if v.multi_arch]
    assert multi and all(v.platforms == (AMD64, ARM64) and v.uses_pypi for v in multi)
    for v in matrix.variants:
        if not v.multi_arch:
            assert v.platforms == (AMD64,) and v.platforms_note, f"{v.name} must say why it is amd64 only"
    assert not matrix.by_name(next(v.name for v in matrix.variants if v.is_default)).multi_arch


def test_a_single_platform_line_must_say_why(tmp_path, matrix):
    default = next(v for v in matrix.variants if v.is_default)
    note = f'platforms_note = "{default.platforms_note}"\n'
    with pytest.raises(MatrixError, match="say why in platforms_note"):
        _matrix_with(tmp_path, note, "")


def test_an_unknown_or_misordered_platform_is_refused(tmp_path):
    line = 'platforms = ["linux/amd64", "linux/arm64"]'
    with pytest.raises(MatrixError, match="must list some of"):
        _matrix_with(tmp_path, line, 'platforms = ["linux/amd64", "linux/riscv64"]')
    with pytest.raises(MatrixError, match="must start with"):
        _matrix_with(tmp_path, line, 'platforms = ["linux/arm64", "linux/amd64"]')


def test_the_arm64_base_is_docker_librarys_per_architecture_name(matrix):
    assert matrix.base_image_for(AMD64) == matrix.base_image
    assert matrix.base_image_for(ARM64) == f"arm64v8/{matrix.base_image}"


def _config(matrix, variant, platforms, **kw):
    return Request(matrix=matrix, variant=variant, platforms=platforms, **kw)


def test_a_platform_the_line_does_not_list_is_refused_naming_the_lines_that_have_it(matrix):
    default = next(v for v in matrix.variants if v.is_default)
    multi = [v.name for v in matrix.variants if v.multi_arch]
    with pytest.raises(UsageError) as err:
        check_platforms(_config(matrix, default, (ARM64,)))
    assert default.platforms_note in str(err.value) and all(name in str(err.value) for name in multi)


def test_zstd_is_refused_for_several_platforms(matrix):
    multi = next(v for v in matrix.variants if v.multi_arch)
    with pytest.raises(UsageError, match="one platform at a time"):
        check_platforms(_config(matrix, multi, multi.platforms, push=True, compression="zstd"))


def test_pushing_an_emulated_platform_needs_allow_cpu_validation_even_on_a_gpu_host(matrix, monkeypatch):
    """Under qemu the image cannot reach the host's GPU: its proof is CPU-only, so pushing it is asked for by name."""
    monkeypatch.setattr(request, "emulation_problem", lambda platform: None)  # qemu registered, as prepare-host does
    multi = next(v for v in matrix.variants if v.multi_arch)
    other = next(p for p in multi.platforms if p != host_platform())
    with pytest.raises(UsageError, match=re.escape(f"{other} runs under emulation")):
        check_request(_config(matrix, multi, multi.platforms, push=True), gpus=1)
    check_request(_config(matrix, multi, multi.platforms, push=True, allow_cpu_validation=True), gpus=1)
    check_request(_config(matrix, multi, (host_platform(),), push=True), gpus=1)


def _binfmt(tmp_path, text):
    (tmp_path / "qemu-aarch64").write_text(text)
    return tmp_path


def test_emulation_needs_qemu_registered_with_the_f_flag(tmp_path):
    assert "not registered" in emulation_problem(ARM64, tmp_path)
    no_f = "enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: P\noffset 0\n"
    assert "F flag" in emulation_problem(ARM64, _binfmt(tmp_path, no_f))
    disabled = "disabled\ninterpreter /usr/bin/qemu-aarch64-static\nflags: PF\n"
    assert "F flag or disabled" in emulation_problem(ARM64, _binfmt(tmp_path, disabled))
    good = "enabled\ninterpreter /usr/bin/qemu-aarch64-static\nflags: PF\noffset 0\n"
    assert emulation_problem(ARM64, _binfmt(tmp_path, good)) is None


def test_host_platform_is_this_machine():
    import platform

    expected = {"x86_64": AMD64, "aarch64": ARM64}.get(platform.machine(), f"linux/{platform.machine()}")
    assert host_platform() == expected


def _child(platform, n):
    return push.Child(platform, "127.0.0.1:5000/x", f"t-{platform[-5:]}", f"sha256:{n:064x}", f"sha256:{n + 9:064x}")


def test_an_index_is_refused_when_a_platform_was_not_validated_and_pushed():
    with pytest.raises(PushFailed, match=re.escape(f"{ARM64} was not validated and pushed")):
        push.plan_index((AMD64, ARM64), {AMD64: _child(AMD64, 1)})
    both = {ARM64: _child(ARM64, 2), AMD64: _child(AMD64, 1)}
    assert [c.platform for c in push.plan_index((AMD64, ARM64), both)] == [AMD64, ARM64]


def test_per_architecture_tags_say_the_architecture():
    assert push.arch_tag("2.0-cu999", ARM64) == "2.0-cu999-arm64"
    assert push.arch_tag("latest", AMD64) == "latest-amd64"


def test_build_py_refuses_arm64_for_an_amd64_only_line_in_one_line(matrix):
    default = next(v for v in matrix.variants if v.is_default)
    done = subprocess.run(
        [sys.executable, "build.py", "--cuda", default.cuda, "--platform", ARM64],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and f"{default.name} is built for {AMD64} only" in done.stderr


def test_the_pipeline_tells_proof_it_runs_under_emulation(matrix, tmp_path, monkeypatch):
    """qemu 8.1+ imitates the guest's /proc/cpuinfo, so `proof` is told, and reads it as emulation."""
    from common.deadlines import emulation
    from pipeline.target import Target
    from pipeline.validation.gate import emulation_env

    multi = next(v for v in matrix.variants if v.multi_arch)
    native = Target(multi, tmp_path, "r", "20000101", "c", "rev", platform=AMD64)
    emulated = Target(multi, tmp_path, "r", "20000101", "c", "rev", platform=ARM64, emulated=True)
    assert emulation_env(native) == {}
    told = emulation_env(emulated)["PROVEN_TORCH_EMULATED"]
    monkeypatch.setenv("PROVEN_TORCH_EMULATED", told)
    assert told.startswith("aarch64 under emulation")
    assert emulation("aarch64", "processor\t: 0\nCPU implementer\t: 0x41\n") == told


def test_reports_of_a_multi_arch_line_are_found_per_architecture(tmp_path):
    """A multi-arch run writes LINE/RUN/ARCH/report.json; the index and the matrix table read those too."""
    import json

    from pipeline.html_report import line_reports, write_index

    runs = ["2.0-cu999/20261101T000000Z", "2.0-cu999/20261203T000000Z/amd64", "2.0-cu999/20261203T000000Z/arm64"]
    for run_dir in runs:
        (tmp_path / run_dir).mkdir(parents=True)
        (tmp_path / run_dir / "report.json").write_text(json.dumps({"variant": "2.0-cu999", "status": "failed"}))
    found = line_reports(tmp_path / "2.0-cu999")
    assert [p.parent.relative_to(tmp_path).as_posix() for p in found] == runs  # oldest first, the newest run last
    page = write_index(tmp_path).read_text()
    assert all(f">{run.split('/', 1)[1]}</a>" in page for run in runs)


def test_ctrl_c_after_one_platform_says_what_that_platform_left_tagged_and_pushed():
    from types import SimpleNamespace as NS

    from pipeline.errors import Interrupted
    from pipeline.line import interrupted

    amd = (NS(ref="127.0.0.1:5000/x"), NS(tags=["2.0-cu999-amd64"]))
    pushed = NS(refs={"127.0.0.1:5000/x:2.0-cu999-amd64": "sha256:1"})
    step = Interrupted("interrupted during the proof")
    err = interrupted(step, {AMD64: amd}, {AMD64: (*amd, pushed)}, push=True)
    assert isinstance(err, Interrupted) and err.exit_code == 130
    assert "nothing was tagged" not in str(err) and "pushed 127.0.0.1:5000/x:2.0-cu999-amd64" in str(err)
    assert str(interrupted(step, {}, {}, push=True)) == "interrupted during the proof; nothing was tagged or pushed"
    assert "nothing was tagged or pushed" in str(interrupted(KeyboardInterrupt(), {}, {}, push=False))
    assert "validated and tagged 127.0.0.1:5000/x:2.0-cu999-amd64" in str(
        interrupted(KeyboardInterrupt(), {AMD64: amd}, {}, push=False)
    )
