"""The smoke checks themselves, run for real on this CPU-only machine, and their GPU gating with given facts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from common import procs
from smoke import checks, dist_worker, facts
from smoke.expect import expect_from_facts

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def host_facts():
    return facts.collect(torch)


def ctx_for(host_facts, require_gpu=False, **fact_overrides):
    f = {**host_facts, **fact_overrides}
    return checks.Context(expect=expect_from_facts(host_facts), require_gpu=require_gpu, facts=f)


# An image (CUDA build) started without --gpus: what the image tests see.
CUDA_BUILD_NO_GPU = {
    "cuda": "12.8",
    "cudnn": 99001,
    "nccl": "2.99.3",
    "cuda_available": False,
    "gpu_count": 0,
    "gpus": [],
    "driver": None,
}
CUDA_EXPECT = {"cuda": "12.8", "cudnn": 99001, "nccl": "2.99.3", "min_driver": "515.43.04"}


def image_ctx(host_facts, require_gpu=False, **fact_overrides):
    expect = {**expect_from_facts(host_facts), **CUDA_EXPECT}
    return checks.Context(expect=expect, require_gpu=require_gpu, facts={**host_facts, **CUDA_BUILD_NO_GPU, **fact_overrides})


# --------------------------------------------------------------------------- facts


def test_host_facts_describe_the_running_torch(host_facts):
    assert host_facts["torch"] == torch.__version__
    assert host_facts["torch_release"] == torch.__version__.split("+")[0]
    assert "+" not in host_facts["torch_release"]
    assert host_facts["cuda"] == torch.version.cuda
    assert host_facts["python"] == ".".join(map(str, sys.version_info[:3]))
    assert host_facts["gpu_count"] == len(host_facts["gpus"]) == torch.cuda.device_count()
    assert isinstance(host_facts["shm_bytes"], int) and host_facts["shm_bytes"] > 0


# --------------------------------------------------------------------------- versions


def test_versions_pass_against_the_running_stack(host_facts):
    outcome = checks.check_versions(ctx_for(host_facts))
    assert outcome.status == "pass", outcome.detail


def test_versions_fail_on_a_wrong_pin(host_facts):
    ctx = ctx_for(host_facts)
    ctx = checks.Context(expect={**ctx.expect, "torch": "1.0.0"}, require_gpu=False, facts=ctx.facts)
    outcome = checks.check_versions(ctx)
    assert outcome.status == "fail"
    assert "torch: expected 1.0.0" in outcome.detail


@pytest.mark.skipif(torch.version.cuda is not None, reason="needs a CPU-only torch")
def test_versions_fail_when_cuda_is_expected_of_a_cpu_torch(host_facts):
    ctx = ctx_for(host_facts)
    ctx = checks.Context(expect={**ctx.expect, **CUDA_EXPECT}, require_gpu=False, facts=ctx.facts)
    outcome = checks.check_versions(ctx)
    assert outcome.status == "fail"
    for fragment in ("cuda: expected 12.8, found absent", "cudnn: expected 9.90.1 (99001)", "nccl: expected 2.99.3"):
        assert fragment in outcome.detail


# --------------------------------------------------------------------------- GPU gating (given facts)

GPU_CHECKS = [checks.check_gpu, checks.check_cudnn, checks.check_amp, checks.check_driver]


@pytest.mark.parametrize("check", GPU_CHECKS, ids=lambda c: c.__name__)
def test_gpu_checks_skip_without_gpu_and_say_why(host_facts, check):
    outcome = check(image_ctx(host_facts))
    assert outcome.status == "skip"
    assert "--gpus all" in outcome.detail


@pytest.mark.parametrize("check", GPU_CHECKS + [checks.check_distributed, checks.check_compile], ids=lambda c: c.__name__)
def test_gpu_checks_fail_without_gpu_when_required(host_facts, check):
    outcome = check(image_ctx(host_facts, require_gpu=True))
    assert outcome.status == "fail"
    assert "--gpus all" in outcome.detail


def test_visible_driver_without_cuda_fails_even_unrequired(host_facts):
    ctx = image_ctx(host_facts, driver="470.82.01", cuda_warning="The NVIDIA driver on your system is too old")
    outcome = checks.check_gpu(ctx)
    assert outcome.status == "fail"
    assert "470.82.01 is older than 515.43.04" in outcome.detail
    driver = checks.check_driver(ctx)
    assert driver.status == "fail" and "update the host driver" in driver.detail


def test_new_enough_driver_passes(host_facts):
    outcome = checks.check_driver(image_ctx(host_facts, driver="550.54.15", driver_source="NVML"))
    assert outcome.status == "pass" and "550.54.15 >= 515.43.04" in outcome.detail


def test_unreadable_driver_with_working_cuda_passes(host_facts):
    ctx = image_ctx(
        host_facts,
        require_gpu=True,
        cuda_available=True,
        gpu_count=1,
        gpus=[{"name": "G", "capability": "9.0", "memory_gb": 80.0}],
    )
    outcome = checks.check_driver(ctx)
    assert outcome.status == "pass" and "not readable" in outcome.detail


def test_gpu_check_rejects_a_gpu_the_build_has_no_kernels_for(host_facts):
    ctx = image_ctx(
        host_facts,
        cuda_available=True,
        gpu_count=1,
        gpus=[{"name": "NVIDIA RTX PRO 6000", "capability": "12.0", "memory_gb": 95.0}],
        arch_list=["sm_50", "sm_80", "sm_86", "sm_90"],
        driver="570.86.15",
    )
    outcome = checks.check_gpu(ctx)
    assert outcome.status == "fail"
    assert "no kernel image is available" in outcome.detail and "sm_120" in outcome.detail


def test_cpu_only_build_skips_gpu_checks_and_driver(host_facts):
    ctx = ctx_for(host_facts, cuda=None, cuda_available=False, gpu_count=0, gpus=[], driver=None)
    ctx = checks.Context(expect={**ctx.expect, "cuda": None}, require_gpu=False, facts=ctx.facts)
    for check in GPU_CHECKS:
        assert check(ctx).status == "skip"


# --------------------------------------------------------------------------- cudnn comparison helpers


def test_conv_fwd_bwd_and_relative_error():
    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    a, b = checks.conv_fwd_bwd(x, w, "cpu"), checks.conv_fwd_bwd(x, w, "cpu")
    assert [t.shape for t in a] == [(2, 4, 8, 8), (2, 3, 8, 8), (4, 3, 3, 3)]
    assert not x.requires_grad and not w.requires_grad  # inputs untouched for the second device
    assert all(checks._rel_err(p, q) == 0.0 for p, q in zip(a, b, strict=True))
    assert checks._rel_err(a[0] * 1.001, a[0]) < 1e-2  # TF32-sized differences pass
    assert checks._rel_err(torch.zeros_like(a[0]), a[0]) >= 1e-2  # garbage does not


def test_nvml_absent_means_no_driver(tmp_path):
    assert facts.nvml_info(str(tmp_path / "libnvidia-ml.so.1")) is None
    version, source = facts.driver_version(proc_file=tmp_path / "absent")
    if facts.nvml_info() is None:
        assert (version, source) == (None, "none")
    proc = tmp_path / "version"
    proc.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n")
    if facts.nvml_info() is None:
        assert facts.driver_version(proc_file=proc) == ("550.54.15", str(proc))


# --------------------------------------------------------------------------- amp (CPU path)


def test_amp_cpu_bf16_trains(host_facts):
    outcome = checks.check_amp_cpu(ctx_for(host_facts))
    assert outcome.status == "pass", outcome.detail
    losses, skipped, problem = checks.train_steps("cpu", torch.bfloat16, use_scaler=False, steps=10)
    assert problem == "" and skipped == 0
    assert losses[-1] < losses[0]


def test_grad_scaler_path_handles_overflow_steps():
    # fp16 on the CPU with GradScaler("cpu"): the same code path the GPU's fp16 run takes
    losses, skipped, problem = checks.train_steps("cpu", torch.float16, use_scaler=True)
    assert problem == "", problem
    assert len(losses) == 30 and losses[-1] < 0.9 * losses[0]


def test_train_steps_notices_a_loss_that_does_not_fall(monkeypatch):
    monkeypatch.setattr(torch.optim, "Adam", lambda params, lr: torch.optim.SGD(params, lr=0.0))  # no learning
    _, _, problem = checks.train_steps("cpu", torch.bfloat16, use_scaler=False, steps=5)
    assert "did not decrease" in problem


# --------------------------------------------------------------------------- distributed (gloo, real torchrun)


@pytest.mark.process
def test_gloo_two_processes_via_torchrun():
    outcome = checks.run_distributed("gloo", 2, timeout=120)
    assert outcome.status == "pass", outcome.detail
    assert "2 ranks" in outcome.detail


def test_dist_verify_catches_wrong_numbers():
    good = dist_worker.expected(1, 2)
    assert dist_worker.verify(1, 2, good) == []
    assert good["all_reduce"] == [3.0] * 4 and good["all_gather"] == [0.0, 1.0]
    bad = {**good, "all_gather": [0.0, 0.0]}
    problems = dist_worker.verify(1, 2, bad)
    assert len(problems) == 1 and "all_gather" in problems[0]
    assert dist_worker.verify(0, 2, {})  # nothing reported is a failure


def test_a_collective_that_times_out_is_one_line_naming_rank_and_collective():
    def stalled():
        raise RuntimeError("[gloo/transport/tcp/pair.cc:598] Timed out waiting 5000ms for recv operation to complete\nmore")

    with pytest.raises(dist_worker.CollectiveFailed) as err:
        dist_worker.bounded(1, "all_reduce", 5, stalled)
    assert str(err.value).startswith("rank 1: all_reduce did not complete within 5 s")
    assert "\n" not in str(err.value) and "Timed out waiting" in str(err.value)


def test_bounded_run_kills_at_deadline_and_keeps_stderr():
    code = "import sys, time; print('started', file=sys.stderr, flush=True); time.sleep(60)"
    done = procs.run_bounded([sys.executable, "-c", code], timeout=3)
    assert done.returncode is None
    assert "started" in done.stderr


def test_failed_torchrun_reports_stderr_tail(monkeypatch):
    monkeypatch.setattr(
        procs, "run_bounded", lambda cmd, timeout, **kwargs: procs.Finished(1, "", "x" * 5000 + "RuntimeError: boom")
    )
    outcome = checks.run_distributed("gloo", 2, timeout=5)
    assert outcome.status == "fail"
    assert outcome.detail.endswith("RuntimeError: boom")
    assert "torchrun exited 1, 0/2 ranks reported" in outcome.detail
    assert len(outcome.detail) < 2000


# --------------------------------------------------------------------------- compile (CPU, Inductor C++)


def test_compile_on_cpu_matches_eager(host_facts):
    outcome = checks.check_compile(ctx_for(host_facts, cuda_available=False, gpu_count=0, gpus=[], driver=None))
    assert outcome.status == "pass", outcome.detail
    assert outcome.detail.startswith("cpu, Inductor C++")


COUNT_COMPILES = """
import json, sys
import torch
from torch._inductor import cpp_builder, cpu_vec_isa
from smoke import checks

probes, builds = [], []
probe, build = cpu_vec_isa.VecISA.check_build, cpp_builder.CppBuilder.build
cpu_vec_isa.VecISA.check_build = lambda self, code: probes.append(str(self)) or probe(self, code)
cpp_builder.CppBuilder.build = lambda self: builds.append(1) or build(self)
outcome = checks.compile_and_compare("cpu")
during = {"status": outcome.status, "detail": outcome.detail, "probes": list(probes), "builds": len(builds)}
cpu_vec_isa.valid_vec_isa_list()  # a compile after the check probes as usual
print(json.dumps({**during, "probes_after": len(probes) - len(during["probes"])}))
"""


@pytest.mark.process
def test_compile_check_builds_its_kernel_but_not_inductors_isa_probe(tmp_path):
    """In a new process with an empty Inductor cache (a new container): g++ compiles the check's kernel, and
    Inductor's test library per vector ISA (most of the check's time on 2 cores) is left for later compiles."""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), PYTHONPATH=str(procs.PACKAGE_ROOT))
    done = subprocess.run([sys.executable, "-c", COUNT_COMPILES], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    counted = json.loads(done.stdout.strip().splitlines()[-1])
    assert counted["status"] == "pass", counted["detail"]
    assert counted["builds"] >= 1 and counted["probes"] == []
    import torch._inductor.cpu_vec_isa as cpu_vec_isa

    if cpu_vec_isa.x86_isa_checker():  # an x86 CPU with vector ISAs: the later compile did probe them
        assert counted["probes_after"] >= 1


def test_compile_without_a_compiler_fails_clearly(monkeypatch):
    monkeypatch.setattr(checks.shutil, "which", lambda name: None)
    outcome = checks.compile_and_compare("cpu")
    assert outcome.status == "fail"
    assert "C++ compiler" in outcome.detail and "g++" in outcome.detail
    assert "\n" not in outcome.detail and "apt-get install gcc g++" in outcome.detail


def test_triton_compiler_is_looked_up_as_triton_does(monkeypatch):
    """$CC first, then gcc, then clang; a bare GPU host with only clang is fine."""
    monkeypatch.setattr(checks.shutil, "which", lambda name: f"/usr/bin/{name}" if name == "clang" else None)
    monkeypatch.delenv("CC", raising=False)
    assert checks.find_compiler("cuda") == "/usr/bin/clang"
    monkeypatch.setattr(checks.shutil, "which", lambda name: f"/opt/{name}" if name in ("mycc", "gcc") else None)
    monkeypatch.setenv("CC", "mycc")
    assert checks.find_compiler("cuda") == "/opt/mycc"


def test_missing_python_headers_is_one_line_for_a_bare_host(monkeypatch):
    monkeypatch.setattr(checks, "python_headers", lambda: None)
    monkeypatch.setattr(checks, "find_compiler", lambda device: "/usr/bin/gcc")
    problem = checks.compile_prerequisites("cuda")
    assert problem.startswith("torch.compile on cuda needs Python's headers (Python.h)")
    assert "python3-dev" in problem and "\n" not in problem


# --------------------------------------------------------------------------- shm / DataLoader


def test_dataloader_with_workers(host_facts):
    outcome = checks.check_shm(ctx_for(host_facts))
    assert outcome.status == "pass", outcome.detail
    assert "2 workers" in outcome.detail and "/dev/shm" in outcome.detail


def test_small_shm_passes_with_a_warning(host_facts, monkeypatch):
    outcome = checks.check_shm(ctx_for(host_facts, shm_bytes=64 * 1024 * 1024))
    assert outcome.status == "pass"
    assert "WARNING" in outcome.detail and "--ipc=host" in outcome.detail


def test_broken_dataloader_fails_with_shm_advice(host_facts, monkeypatch):
    monkeypatch.setattr(
        checks,
        "shm_roundtrip",
        lambda pin_memory, workers=2, timeout=None: "RuntimeError: DataLoader worker (pid 7) is killed by signal: Bus error",
    )
    outcome = checks.check_shm(ctx_for(host_facts, shm_bytes=64 * 1024 * 1024))
    assert outcome.status == "fail"
    assert "Bus error" in outcome.detail and "--shm-size" in outcome.detail


def test_the_dataloader_runs_in_a_child_that_answers_in_one_json_line(monkeypatch):
    """What the child says is the check's problem; a child that crashes is named with its last stderr line."""
    seen = {}

    def bounded(cmd, timeout, **kwargs):
        seen.update(cmd=cmd, timeout=timeout, **kwargs)
        return procs.Finished(0, 'a warning\n{"problem": "batch for indices [0] came back corrupted"}\n', "")

    monkeypatch.setattr(procs, "run_bounded", bounded)
    assert checks.shm_roundtrip(pin_memory=True, timeout=30) == "batch for indices [0] came back corrupted"
    assert seen["cmd"][1:] == ["-m", "smoke.shm_worker", "--workers", "2", "--timeout", "15.0", "--pin-memory"]
    assert seen["timeout"] == 30 and seen["cwd"] == str(procs.PACKAGE_ROOT) and "PYTHONPATH" in seen["env"]
    monkeypatch.setattr(procs, "run_bounded", lambda cmd, timeout, **kwargs: procs.Finished(1, "", "Traceback\nImportError: x"))
    assert checks.shm_roundtrip(pin_memory=False, timeout=30) == (
        "its child (python -m smoke.shm_worker) exited 1 without an answer: ImportError: x"
    )


def test_a_noexec_temp_folder_is_named_before_inductor_fails_deep_inside(monkeypatch, tmp_path):
    """Docker's --tmpfs /tmp is noexec: Inductor's compiled .so there cannot be loaded."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(checks, "noexec", lambda path: path == str(tmp_path))
    problem = checks.compile_prerequisites("cpu")
    assert problem.startswith(f"torch.compile on cpu cannot load the code it compiles: {tmp_path} is mounted noexec")
    assert "--tmpfs /tmp:exec" in problem and "\n" not in problem
    monkeypatch.setattr(checks, "noexec", lambda path: False)
    assert checks.compile_prerequisites("cpu") is None


def test_a_teardown_that_hangs_is_bounded_and_named():
    """The CUDA 12.1 PyPI line's gloo destroy_process_group hung on one rank in about 1 of 10 loaded runs here."""
    import threading
    import time as clock
    from types import SimpleNamespace

    from smoke.dist_worker import tear_down

    stuck = threading.Event()
    started = clock.monotonic()
    assert tear_down(SimpleNamespace(destroy_process_group=stuck.wait), 0.5).startswith("destroy_process_group did not return")
    assert clock.monotonic() - started < 5
    stuck.set()
    assert tear_down(SimpleNamespace(destroy_process_group=lambda: None), 5) == "clean"
