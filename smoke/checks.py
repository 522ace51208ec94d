"""The smoke checks: one function each, taking a Context and returning an Outcome.

GPU checks never fall back to the CPU: without a usable GPU they are "skip" with
the reason, or "fail" when a GPU is required (--require-gpu) or a driver is
visible but CUDA does not work. Checks that also have a CPU form (distributed
over gloo, torch.compile with Inductor's C++ backend, CPU autocast) say which
form ran in their detail.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import logging
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from common import deadlines, procs
from common import rules as common_rules
from common.procs import free_port, package_env
from common.rules import BAKED_SPEC, CHECK_NEEDS_GPU
from smoke import rules

STDERR_TAIL = 1500


@dataclass(frozen=True)
class Outcome:
    status: str  # "pass" | "fail" | "skip"
    detail: str


def passed(detail: str) -> Outcome:
    return Outcome("pass", detail)


def failed(detail: str) -> Outcome:
    return Outcome("fail", detail)


@dataclass(frozen=True)
class Context:
    """What every check may read: the expectations, the mode and the machine's facts."""

    expect: dict
    require_gpu: bool
    facts: dict

    @property
    def cuda_ok(self) -> bool:
        return bool(self.facts.get("cuda_available")) and self.facts.get("gpu_count", 0) > 0

    @property
    def gpu_needed(self) -> bool:
        """A GPU must work: --require-gpu, or a driver is visible to a CUDA build."""
        driver_visible = bool(self.facts.get("driver")) and self.expect.get("cuda") is not None
        return self.require_gpu or driver_visible

    def no_gpu_reason(self) -> str:
        facts = self.facts
        if not facts.get("cuda"):
            return f"this torch build has no CUDA (torch {facts.get('torch')})"
        if facts.get("driver"):
            verdict = rules.driver_status(
                facts["driver"], self.expect.get("min_driver"), facts.get("cuda"), self.expect.get("driver_lines")
            )
            hint = verdict.message if verdict.status == "fail" else (facts.get("cuda_warning") or "no GPU usable")
            return f"NVIDIA driver {facts['driver']} is visible but torch.cuda.is_available() is False: {hint}"
        return "no GPU visible (run with --gpus all)"

    def gpu_gate(self) -> Outcome | None:
        """None when the GPU form of a check can run, else its skip or fail."""
        if self.cuda_ok:
            return None
        reason = self.no_gpu_reason()
        return failed(reason) if self.gpu_needed else Outcome("skip", reason)


# --------------------------------------------------------------------------- 1. versions


def _installed_distributions() -> dict[str, str]:
    return {
        common_rules.normalize_name(d.metadata["Name"]): d.version
        for d in importlib.metadata.distributions()
        if d.metadata["Name"]
    }


def check_versions(ctx: Context) -> Outcome:
    """Pins equal what is installed and loaded; torch's CUDA wheels satisfy its requirements."""
    import torch

    facts = ctx.facts
    comparisons = rules.compare_versions(ctx.expect, facts)
    problems = [c.describe() for c in comparisons if not c.ok]
    problems += facts.get("import_errors", [])

    from smoke import facts as facts_mod

    runtime, compiled = facts_mod.cudnn_runtime_and_compiled(torch)
    mismatch = rules.cudnn_runtime_vs_compiled(runtime, compiled)
    if mismatch:
        problems.append(mismatch)

    requires = importlib.metadata.requires("torch") or []
    wheels_ok, wheel_problems = rules.check_requirements(requires, _installed_distributions(), rules.default_environment())
    problems += wheel_problems

    if problems:
        return failed("; ".join(problems))
    summary = ", ".join(c.describe() for c in comparisons)  # each label with its own value (cudnn: its release too)
    wheels = f"{len(wheels_ok)} CUDA wheels match torch's requirements" if wheels_ok else "no CUDA wheels required"
    return passed(f"{summary}; {wheels}")


# --------------------------------------------------------------------------- 2. gpu


def check_gpu(ctx: Context) -> Outcome:
    """CUDA works on every visible GPU and the build has kernels for each one's architecture."""
    gate = ctx.gpu_gate()
    if gate:
        return gate
    import torch

    gpus = ctx.facts["gpus"]
    caps = [(g["name"], tuple(int(x) for x in g["capability"].split("."))) for g in gpus]
    problems = rules.arch_problems(caps, ctx.facts.get("arch_list", []))
    if problems:
        return failed("; ".join(problems))
    for index in range(len(gpus)):
        x = torch.arange(1024, dtype=torch.float32, device=f"cuda:{index}")
        total = (x * 2).sum().item()
        if total != 1023 * 1024:
            return failed(f"GPU {index}: a simple kernel gave {total}, expected {1023 * 1024}")
    torch.cuda.synchronize()
    listed = "; ".join(f"{i}: {g['name']} sm_{g['capability'].replace('.', '')} {g['memory_gb']} GB" for i, g in enumerate(gpus))
    return passed(f"{len(gpus)} GPU(s): {listed}")


# --------------------------------------------------------------------------- 3. cudnn


def _rel_err(a, b) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-12))


def conv_fwd_bwd(x, w, device: str):
    """(output, grad_input, grad_weight) of conv2d on `device`, returned on the CPU."""
    import torch.nn.functional as F

    xi = x.detach().to(device).requires_grad_()
    wi = w.detach().to(device).requires_grad_()
    out = F.conv2d(xi, wi, padding=1)
    out.square().sum().backward()
    return out.detach().cpu(), xi.grad.cpu(), wi.grad.cpu()


def check_cudnn(ctx: Context) -> Outcome:
    """conv2d forward + backward through cuDNN agrees with the CPU (TF32-sized tolerance)."""
    gate = ctx.gpu_gate()
    if gate:
        return gate
    import torch

    if not torch.backends.cudnn.is_available():
        return failed("torch.backends.cudnn.is_available() is False on a CUDA build")
    if not torch.backends.cudnn.enabled:
        return failed("torch.backends.cudnn.enabled is False")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, 32, 32, generator=gen)
    w = torch.randn(8, 3, 3, 3, generator=gen)
    cpu = conv_fwd_bwd(x, w, "cpu")
    gpu = conv_fwd_bwd(x, w, "cuda")
    torch.cuda.synchronize()
    errors = {name: _rel_err(g, c) for name, g, c in zip(("output", "grad_input", "grad_weight"), gpu, cpu, strict=True)}
    # TF32 (cuDNN's default for fp32 convs on Ampere+) gives ~1e-3; garbage gives ~1.
    bad = {k: v for k, v in errors.items() if not v < 1e-2}
    if bad:
        return failed("cuDNN conv2d differs from the CPU: " + ", ".join(f"{k} rel. error {v:.2e}" for k, v in bad.items()))
    return passed(
        f"cuDNN {rules.cudnn_str(torch.backends.cudnn.version())} conv2d fwd+bwd matches CPU "
        f"(max rel. error {max(errors.values()):.1e})"
    )


# --------------------------------------------------------------------------- 4. amp


def train_steps(device: str, dtype, use_scaler: bool, steps: int = 30) -> tuple[list[float], int, str]:
    """A tiny regression trained under torch.autocast; returns (losses, skipped steps, problem or '')."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x = torch.randn(256, 64, device=device)
    y = x @ torch.randn(64, 1, device=device)
    scaler = torch.amp.GradScaler(device) if use_scaler else None
    losses, skipped = [], 0
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=dtype):
            out = model(x)
            if out.dtype != dtype:
                return losses, skipped, f"autocast({device}, {dtype}) produced {out.dtype}: autocast is not active"
            loss = F.mse_loss(out.float(), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            finite = all(torch.isfinite(p.grad).all() for p in model.parameters())
            before = scaler.get_scale()
            scaler.step(opt)
            scaler.update()
            if not finite:
                skipped += 1  # GradScaler skips the step and lowers the scale: expected early on
                if scaler.get_scale() >= before:
                    return losses, skipped, f"step {step}: non-finite grads but GradScaler did not lower the scale"
        else:
            loss.backward()
            if not all(torch.isfinite(p.grad).all() for p in model.parameters()):
                return losses, skipped, f"step {step}: non-finite gradients"
            opt.step()
        losses.append(loss.item())
    if scaler is not None and skipped > steps // 2:
        return losses, skipped, f"GradScaler skipped {skipped}/{steps} steps for non-finite gradients"
    if not all(map(lambda v: v == v and abs(v) != float("inf"), losses)):
        return losses, skipped, f"non-finite loss: {losses}"
    if not losses[-1] < 0.9 * losses[0]:
        return losses, skipped, f"loss did not decrease: {losses[0]:.4g} -> {losses[-1]:.4g}"
    return losses, skipped, ""


def check_amp(ctx: Context) -> Outcome:
    """fp16 autocast + GradScaler on the GPU (and bf16 where supported) trains a tiny model."""
    gate = ctx.gpu_gate()
    if gate:
        return gate
    import torch

    parts = []
    runs = [("float16", torch.float16, True)]
    if torch.cuda.is_bf16_supported():
        runs.append(("bfloat16", torch.bfloat16, False))
    for label, dtype, scaler in runs:
        losses, skipped, problem = train_steps("cuda", dtype, scaler)
        if problem:
            return failed(f"cuda {label}: {problem}")
        extra = f", {skipped} step(s) skipped by GradScaler" if skipped else ""
        parts.append(f"{label} loss {losses[0]:.3g} -> {losses[-1]:.3g}{extra}")
    if len(runs) == 1:
        parts.append("bf16 not supported by this GPU")
    return passed("cuda " + "; ".join(parts))


def check_amp_cpu(ctx: Context) -> Outcome:
    """bf16 autocast on the CPU trains a tiny model (the CPU path, runs everywhere)."""
    import torch

    losses, _, problem = train_steps("cpu", torch.bfloat16, use_scaler=False)
    if problem:
        return failed(f"cpu bfloat16: {problem}")
    return passed(f"cpu bfloat16 loss {losses[0]:.3g} -> {losses[-1]:.3g}")


# --------------------------------------------------------------------------- 5. distributed


def tail(text: str, limit: int = STDERR_TAIL) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def run_distributed(backend: str, nproc: int, timeout: float | None = None) -> Outcome:
    """all_reduce/broadcast/all_gather over `backend` with `nproc` ranks, launched by torchrun
    (within "distributed" in deadlines.DEADLINES, scaled under emulation; each rank gets half of it)."""
    timeout = deadlines.wait_for("distributed") if timeout is None else timeout
    env = package_env()
    env.setdefault("OMP_NUM_THREADS", "1")
    if backend == "gloo":
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # containers without a resolvable hostname
    else:
        env.setdefault("NCCL_DEBUG", "WARN")  # NCCL says why it failed in the stderr tail
    last = None
    for _attempt in range(2):  # a second try only if the free port was taken meanwhile
        with tempfile.TemporaryDirectory(prefix="smoke-dist-") as out_dir:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(nproc)]
            cmd += ["--master_addr", "127.0.0.1", "--master_port", str(free_port())]
            cmd += ["-m", "smoke.dist_worker", "--backend", backend, "--out", out_dir, "--timeout", str(timeout / 2)]
            last = procs.run_bounded(cmd, timeout, env=env, grace=0)
            records = [json.loads(p.read_text()) for p in sorted(Path(out_dir).glob("rank*.json"))]
        if last.returncode is None:
            return failed(f"{backend} x{nproc}: timed out after {timeout:.0f} s; stderr: {tail(last.stderr)}")
        if last.returncode == 0 and len(records) == nproc and not any(r["problems"] for r in records):
            hung = [f"rank {r['rank']}" for r in records if r.get("teardown", "clean") != "clean"]
            note = f"; teardown: destroy_process_group hung on {', '.join(hung)} (exited anyway)" if hung else ""
            return passed(f"{backend}, {nproc} ranks via torchrun: all_reduce, broadcast, all_gather correct{note}")
        if "address already in use" not in last.stderr.lower():
            break
    problems = [p for r in records for p in r["problems"]]
    reason = "; ".join(problems) if problems else f"torchrun exited {last.returncode}, {len(records)}/{nproc} ranks reported"
    return failed(f"{backend} x{nproc}: {reason}; stderr: {tail(last.stderr)}")


def check_distributed(ctx: Context) -> Outcome:
    """NCCL across all GPUs when there are GPUs; otherwise gloo with 2 CPU processes."""
    if ctx.cuda_ok:
        outcome = run_distributed("nccl", ctx.facts["gpu_count"])
        advice = rules.shm_advice(ctx.facts.get("shm_bytes"))
        if outcome.status == "fail" and advice:  # NCCL's intra-node transport lives in /dev/shm
            return failed(f"{outcome.detail}; {advice}")
        return outcome
    if ctx.gpu_needed:
        return failed(f"nccl: {ctx.no_gpu_reason()}")
    outcome = run_distributed("gloo", 2)
    return Outcome(outcome.status, outcome.detail + " (CPU; no GPU)") if outcome.status == "pass" else outcome


# --------------------------------------------------------------------------- 6. compile


def find_compiler(device: str) -> str | None:
    """The compiler torch.compile will need, looked up as its backend does: Inductor's CPU
    backend wants C++ ($CXX, g++, c++, clang++); Triton builds its launcher with C ($CC, gcc, clang)."""
    names = [os.environ.get("CXX"), "g++", "c++", "clang++"] if device == "cpu" else [os.environ.get("CC"), "gcc", "clang"]
    for name in filter(None, names):
        found = shutil.which(name)
        if found:
            return found
    return None


def python_headers() -> Path | None:
    """Python.h of this interpreter, which Triton's launcher (and Inductor's C++) compile against; None when absent."""
    import sysconfig

    header = Path(sysconfig.get_paths()["include"]) / "Python.h"
    return header if header.is_file() else None


def inductor_cache_dir() -> str:
    """Where Inductor writes (and loads) the code it compiles: $TORCHINDUCTOR_CACHE_DIR, else the temp folder."""
    return os.environ.get("TORCHINDUCTOR_CACHE_DIR") or tempfile.gettempdir()


def noexec(path: str) -> bool:
    """True when `path` is on a file system mounted noexec (compiled code there cannot be loaded)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_NOEXEC)
    except OSError:
        return False


def compile_prerequisites(device: str) -> str | None:
    """One line saying what torch.compile on `device` lacks on this machine, or None."""
    cache = inductor_cache_dir()
    if noexec(cache):
        return (
            f"torch.compile on {device} cannot load the code it compiles: {cache} is mounted noexec "
            "(Docker's --tmpfs /tmp is); mount it with exec (--tmpfs /tmp:exec, a Kubernetes emptyDir is fine) "
            "or set TORCHINDUCTOR_CACHE_DIR to a writable folder that allows exec"
        )
    in_image = BAKED_SPEC.is_file()
    fix = "the image is supposed to ship it: rebuild the image" if in_image else "install it"
    if find_compiler(device) is None:
        need = (
            "a C++ compiler ($CXX, g++ or clang++) for Inductor's CPU backend"
            if device == "cpu"
            else ("a C compiler ($CC, gcc or clang) for Triton's launcher")
        )
        return f"torch.compile on {device} needs {need}; none found on PATH: {fix} (Debian: apt-get install gcc g++)"
    if python_headers() is None:
        import sysconfig

        return (
            f"torch.compile on {device} needs Python's headers (Python.h), not found in {sysconfig.get_paths()['include']}: "
            f"{fix} (Debian: apt-get install python3-dev)"
        )
    return None


def compile_and_compare(device: str) -> Outcome:
    import torch

    missing = compile_prerequisites(device)
    if missing:
        return failed(missing)
    compiler = find_compiler(device)
    if device == "cpu":  # "No CUDA runtime is found, using CUDA_HOME=..." is noise for a CPU compile
        logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).to(device).eval()
    x = torch.randn(16, 32, device=device)
    try:
        with torch.no_grad(), skip_isa_probe(device):  # inference graph only: half the compile time of a training graph
            eager = model(x)
            compiled = torch.compile(model, fullgraph=True)  # fullgraph: a graph break raises instead of running eager
            out = compiled(x)
            again = compiled(x + 1)
            eager_again = model(x + 1)
    except Exception as err:  # Inductor's errors are pages long: the first line says what failed
        first = (str(err).strip().splitlines() or [""])[0][:300]
        return failed(f"torch.compile on {device} failed: {type(err).__name__}: {first}")
    err = max((out - eager).abs().max().item(), (again - eager_again).abs().max().item())
    if not err <= 1e-4:
        return failed(f"torch.compile on {device} differs from eager by {err:.2e}")
    if device == "cuda":
        return passed(f"{device}, Inductor/Triton ({compiler}): matches eager (max abs diff {err:.1e})")
    return passed(
        f"{device}, Inductor C++ ({compiler}, scalar kernels): matches eager (max abs diff {err:.1e}); "
        "a first torch.compile in a new container adds its vector-ISA probe"
    )


@contextlib.contextmanager
def skip_isa_probe(device: str):
    """On the CPU, compile scalar C++ kernels, without Inductor's probe of the vector instruction sets:
    before its first CPU kernel Inductor compiles and loads a test library per instruction set and
    feature the CPU claims (AVX2, AVX-512 and its BF16 and VNNI, AMX: up to eight g++ runs), which was
    most of this check's time on 2 cores (docs/benchmarks.md). What the check proves stays the same:
    Inductor generates C++, this host's compiler builds it against Python's headers, the library
    loads from the cache folder and computes what eager computes. The probe only chooses how wide the
    kernels are (a failed probe falls back to a narrower set), and a user's first torch.compile in a
    new container still runs it. `cpp.vec_isa_ok = False` is Inductor's own switch; the probe's
    answers are forgotten afterwards, so a later compile in this process probes as usual."""
    if device != "cpu":
        yield
        return
    import torch._inductor.config as inductor_config

    try:
        with inductor_config.patch({"cpp.vec_isa_ok": False}):
            yield
    finally:
        for module in ("torch._inductor.cpu_vec_isa", "torch._inductor.codecache"):  # where torch 2.5+ / 2.4 keep it
            cached = getattr(sys.modules.get(module), "valid_vec_isa_list", None)
            if hasattr(cached, "cache_clear"):
                cached.cache_clear()


def check_compile(ctx: Context) -> Outcome:
    """torch.compile of a tiny model matches eager: on the GPU with Triton, else on the CPU."""
    if ctx.cuda_ok:
        return compile_and_compare("cuda")
    if ctx.gpu_needed:
        return failed(f"cuda: {ctx.no_gpu_reason()}")
    outcome = compile_and_compare("cpu")
    return Outcome(outcome.status, outcome.detail + " (no GPU)") if outcome.status == "pass" else outcome


# --------------------------------------------------------------------------- 7. shm


def shm_roundtrip(pin_memory: bool, workers: int = 2, timeout: float | None = None) -> str:
    """The DataLoader round trip (smoke.shm_worker) in a child of its own, within `timeout` seconds
    (None: "shm" in deadlines.DEADLINES, scaled under emulation), its DataLoader waiting half of that for
    any one batch; '' when the data came through intact, else the problem in one line.

    In a child because a DataLoader can hang: a worker forked while another thread held a lock
    blocks on it for good, and whoever waits on that worker (the DataLoader's teardown, the
    interpreter's exit) with it. At the deadline the child and its workers are stopped.
    """
    timeout = deadlines.wait_for("shm") if timeout is None else timeout
    cmd = [sys.executable, "-m", "smoke.shm_worker", "--workers", str(workers), "--timeout", str(timeout / 2)]
    cmd += ["--pin-memory"] if pin_memory else []
    # cwd: a smoke/ folder in the caller's working directory cannot shadow this one (python -m looks there first)
    done = procs.run_bounded(cmd, timeout, env=package_env(), cwd=str(procs.PACKAGE_ROOT))
    reply = None
    for line in reversed(done.stdout.splitlines()):
        try:
            reply = json.loads(line)
            break
        except ValueError:
            continue
    if isinstance(reply, dict) and isinstance(reply.get("problem"), str):
        return reply["problem"]
    if done.returncode is None:
        return f"no answer within {timeout:.0f} s (stopped)"
    last = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
    return f"its child (python -m smoke.shm_worker) exited {done.returncode} without an answer: {last}"


def check_shm(ctx: Context) -> Outcome:
    """A DataLoader with 2 worker processes (and pinned memory with CUDA) moves data intact; /dev/shm is big enough."""
    size = ctx.facts.get("shm_bytes")
    pin = ctx.cuda_ok
    problem = shm_roundtrip(pin_memory=pin)
    where = f"/dev/shm {rules.human_bytes(size)}"
    if problem:
        advice = rules.shm_advice(size)
        return failed(f"DataLoader with 2 workers: {problem}; {where}" + (f"; {advice}" if advice else ""))
    warning = rules.shm_advice(size)
    detail = f"DataLoader 2 workers{' + pin_memory' if pin else ''} ok; {where}"
    return passed(detail + (f"; WARNING: {warning}" if warning else ""))


# --------------------------------------------------------------------------- 8. driver


def check_driver(ctx: Context) -> Outcome:
    """The host's NVIDIA driver is new enough for this image's CUDA line."""
    facts = ctx.facts
    verdict = rules.driver_status(
        facts.get("driver"),
        ctx.expect.get("min_driver"),
        ctx.expect.get("cuda") or facts.get("cuda"),
        ctx.expect.get("driver_lines"),
    )
    if verdict.status == "missing":
        if ctx.cuda_ok:  # e.g. WSL2 without a readable NVML: a working CUDA proves the driver fits
            return passed(f"driver version not readable (no NVML, no /proc/driver/nvidia), but CUDA {facts.get('cuda')} works")
        if ctx.expect.get("cuda") is None and not ctx.require_gpu:
            return Outcome("skip", "CPU-only build expected; no driver needed")
        return failed(verdict.message) if ctx.gpu_needed else Outcome("skip", verdict.message)
    source = facts.get("driver_source")
    return Outcome(verdict.status, verdict.message + (f" (from {source})" if source and verdict.status == "pass" else ""))


# --------------------------------------------------------------------------- registry

# (name, function, gpu_check): a gpu_check is a skip without a GPU unless one is required.
_FUNCTIONS = {
    "versions": check_versions,
    "driver": check_driver,
    "gpu": check_gpu,
    "cudnn": check_cudnn,
    "amp": check_amp,
    "amp_cpu": check_amp_cpu,
    "shm": check_shm,
    "distributed": check_distributed,
    "compile": check_compile,
}
# (name, function, needs a GPU) in the order they run; the names and the GPU column are
# common.rules.CHECK_NEEDS_GPU's, which the host's signed test result reads too.
CHECKS = tuple((name, _FUNCTIONS[name], needs_gpu) for name, needs_gpu in CHECK_NEEDS_GPU.items())
NAMES = tuple(name for name, _, _ in CHECKS)
