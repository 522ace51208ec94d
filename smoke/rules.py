"""Pure decision logic of the smoke checks: given values in, verdicts out.

Nothing here imports torch or touches the machine, so every rule is unit-tested
with given values (a GPU the build machine does not have, a driver it does not
run, a wheel set it did not install).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from common.rules import normalize_name

MIB = 1024 * 1024
DOCKER_DEFAULT_SHM = 64 * MIB


# --------------------------------------------------------------------------- versions


def release(version: str | None) -> str | None:
    """'1.2.3+cu999' -> '1.2.3'; None stays None."""
    if version is None:
        return None
    return str(version).split("+", 1)[0]


def version_tuple(text: str) -> tuple[int, ...]:
    """Leading numeric release of a version string: '12.8.93' -> (12, 8, 93), '1.2.3rc1' -> (1, 2, 3)."""
    parts = []
    for piece in str(text).strip().split("."):
        match = re.match(r"\d+", piece)
        if not match:
            break
        parts.append(int(match.group()))
        if match.end() != len(piece):  # '1rc1', '0+cu128': stop after the number
            break
    return tuple(parts)


def _padded(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)), b + (0,) * (width - len(b))


def version_cmp(a: str, b: str) -> int:
    """-1, 0 or 1, comparing numeric releases (trailing zeros ignored)."""
    x, y = _padded(version_tuple(a), version_tuple(b))
    return (x > y) - (x < y)


def cudnn_str(value: int | None) -> str | None:
    """90807 -> '9.8.7' (cuDNN >= 9 encodes major*10000 + minor*100 + patch)."""
    if value is None:
        return None
    value = int(value)
    if value >= 10000:
        return f"{value // 10000}.{value // 100 % 100}.{value % 100}"
    return f"{value // 1000}.{value // 100 % 10}.{value % 100}"  # cuDNN 8: major*1000 + minor*100 + patch


@dataclass(frozen=True)
class Comparison:
    """One pinned value against what was found; `show` writes a value as a person reads it."""

    what: str
    expected: object
    actual: object
    ok: bool
    show: Callable[[object], str] = str

    def _shown(self, value: object) -> str:
        return "absent" if value is None else self.show(value)

    def describe(self) -> str:
        """'cudnn 9.31.5 (93105)': the label, then its own value, nothing else's."""
        if self.ok:
            return f"{self.what} {self._shown(self.actual)}"
        return f"{self.what}: expected {self._shown(self.expected)}, found {self._shown(self.actual)}"


def cudnn_shown(value: object) -> str:
    """93105 -> '9.31.5 (93105)': the release, and the integer torch reports (what the pin holds)."""
    return f"{cudnn_str(value)} ({value})"


def compare_versions(expect: dict, facts: dict) -> list[Comparison]:
    """Compare the pins in `expect` with `facts`; a null pin means "must be absent".

    Releases are compared without local suffixes ('1.2.3+cu999' matches '1.2.3');
    Python is compared on major.minor; cuDNN as the integer torch reports.
    """
    out = []
    for key, fact_key in (("torch", "torch"), ("torchvision", "torchvision"), ("torchaudio", "torchaudio")):
        want, got = expect.get(key), release(facts.get(fact_key))
        out.append(Comparison(key, want, got, want == got))
    out.append(Comparison("cuda", expect.get("cuda"), facts.get("cuda"), expect.get("cuda") == facts.get("cuda")))
    want_cudnn, got_cudnn = expect.get("cudnn"), facts.get("cudnn")
    out.append(Comparison("cudnn", want_cudnn, got_cudnn, want_cudnn == got_cudnn, show=cudnn_shown))
    out.append(Comparison("nccl", expect.get("nccl"), facts.get("nccl"), expect.get("nccl") == facts.get("nccl")))
    py = facts.get("python")
    py_minor = ".".join(str(py).split(".")[:2]) if py else None
    out.append(Comparison("python", expect.get("python"), py_minor, expect.get("python") == py_minor))
    return out


def cudnn_runtime_vs_compiled(runtime: tuple[int, ...] | None, compiled: tuple[int, ...] | None) -> str | None:
    """None when the loaded libcudnn fits what torch was built against, else the problem.

    cuDNN keeps compatibility within a major version for newer minors, so the rule
    is: same major, and runtime (major, minor) >= compiled (major, minor).
    """
    if runtime is None or compiled is None:
        return None
    rt, ct = tuple(runtime), tuple(compiled)
    if rt[:1] != ct[:1] or rt[:2] < ct[:2]:
        return (
            f"loaded cuDNN {'.'.join(map(str, rt))} does not fit the {'.'.join(map(str, ct))} torch was built "
            "against; another libcudnn is probably first on LD_LIBRARY_PATH (unset it, or reinstall the nvidia-cudnn wheel)"
        )
    return None


# --------------------------------------------------------------------------- requirements


def default_environment() -> dict[str, str]:
    """Marker variables for this interpreter (PEP 508 names, from `packaging`), with no extra asked for."""
    from packaging.markers import default_environment as markers_environment

    return {**markers_environment(), "extra": ""}


def is_cuda_runtime_requirement(name: str) -> bool:
    """The wheels that carry torch's CUDA stack: nvidia-* and triton (torch.compile on GPU)."""
    return name.startswith("nvidia-") or name == "triton"


def check_requirements(requires: list[str], installed: dict[str, str | None], env: dict[str, str]) -> tuple[list[str], list[str]]:
    """Check torch's nvidia-*/triton requirements (its Requires-Dist lines, PEP 508, read by
    `packaging`) against installed versions, for the marker environment `env`.

    `installed` maps normalized names to versions (None: not installed).
    Returns (ok_lines, problems); a line that cannot be read is a problem, not a skip.
    """
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion

    ok, problems = [], []
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement as err:
            problems.append(f"cannot read torch's requirement {line!r}: {err}")
            continue
        name = normalize_name(req.name)
        if not is_cuda_runtime_requirement(name) or (req.marker is not None and not req.marker.evaluate(env)):
            continue
        have = installed.get(name)
        if have is None:
            problems.append(f"{name} is required by torch ({line.strip()}) but not installed")
            continue
        try:
            fits = req.specifier.contains(have, prereleases=True)
        except InvalidVersion:
            fits = False
        if fits:
            ok.append(f"{name}=={have}")
        else:
            problems.append(f"{name} {have} installed, torch requires {req.specifier}")
    return ok, problems


# --------------------------------------------------------------------------- GPU arch list


def _parse_arch(entry: str) -> tuple[str, int, int, str] | None:
    """'sm_90a' -> ('sm', 9, 0, 'a'); 'compute_120' -> ('compute', 12, 0, ''); else None."""
    match = re.fullmatch(r"(sm|compute)_(\d+)(\d)([a-z]?)", entry.strip())
    if not match:
        return None
    return match.group(1), int(match.group(2)), int(match.group(3)), match.group(4)


def arch_supported(capability: tuple[int, int], arch_list: list[str]) -> bool:
    """Can a GPU of `capability` run kernels from a build with `arch_list`?

    The rule (CUDA's binary and PTX compatibility, simplified):
      * sm_XY (cubin) runs on GPUs of the same major X with minor >= Y
        (sm_80 runs on an 8.6 GPU; sm_90 does not run on 10.0 or 12.0);
        arch-specific sm_XYa runs only on exactly X.Y;
      * compute_XY (PTX) is JIT-compiled by the driver for any GPU with
        capability >= X.Y, any major.
    """
    major, minor = capability
    for entry in arch_list:
        parsed = _parse_arch(entry)
        if parsed is None:
            continue
        kind, a_major, a_minor, suffix = parsed
        if kind == "sm":
            if suffix == "a":
                if (a_major, a_minor) == (major, minor):
                    return True
            elif a_major == major and a_minor <= minor:
                return True
        elif (a_major, a_minor) <= (major, minor):
            return True
    return False


def arch_problems(gpus: list[tuple[str, tuple[int, int]]], arch_list: list[str]) -> list[str]:
    """One message per GPU (name, capability) this build has no kernels for."""
    problems = []
    shown = " ".join(arch_list) if arch_list else "(empty)"
    for index, (name, cap) in enumerate(gpus):
        if arch_supported(cap, arch_list):
            continue
        problems.append(
            f"GPU {index} {name} is sm_{cap[0]}{cap[1]}, but this torch build has kernels only for {shown}: "
            f"every CUDA op would fail with 'CUDA error: no kernel image is available for execution on the device'; "
            f"use a variant built for a newer CUDA line whose arch list includes sm_{cap[0]}{cap[1]}"
        )
    return problems


# --------------------------------------------------------------------------- driver


# The oldest NVIDIA driver each CUDA major version runs on (CUDA minor-version
# compatibility: a driver of the major's first release runs every minor of it),
# https://docs.nvidia.com/deploy/cuda-compatibility/ ("Minor Version Compatibility").
# CUDA 13.x needs the R580 driver line or newer.
CUDA_MAJOR_MIN_DRIVER = {"11": "450.80.02", "12": "525.60.13", "13": "580.65.06"}


def min_driver_for(cuda_line: str | None) -> str | None:
    """NVIDIA's minimum driver for a CUDA line (by its major version); None when unknown or no CUDA."""
    if not cuda_line:
        return None
    return CUDA_MAJOR_MIN_DRIVER.get(str(cuda_line).split(".")[0])


@dataclass(frozen=True)
class DriverVerdict:
    status: str  # "pass" | "fail" | "missing"
    message: str


def driver_status(
    driver: str | None,
    min_driver: str | None,
    cuda_line: str | None,
    lines: dict[str, str] | None = None,
) -> DriverVerdict:
    """Judge the host's NVIDIA driver against the image's minimum.

    `lines` optionally maps CUDA lines to their minimum driver (e.g. from the
    variant matrix); when given, a too-old driver gets the newest line it can run
    as a suggestion.
    """
    line = f"CUDA {cuda_line}" if cuda_line else "this image"
    if not driver:
        return DriverVerdict("missing", "no NVIDIA driver visible (run with --gpus all)")
    if not version_tuple(driver):
        return DriverVerdict("fail", f"cannot read the NVIDIA driver version {driver!r}")
    if not min_driver:
        return DriverVerdict("pass", f"driver {driver} (no minimum given)")
    if version_cmp(driver, min_driver) >= 0:
        return DriverVerdict("pass", f"driver {driver} >= {min_driver} required by {line}")
    advice = f"update the host driver to >= {min_driver}"
    fitting = [
        (version_tuple(cuda), cuda, need)
        for cuda, need in (lines or {}).items()
        if version_cmp(driver, need) >= 0 and (not cuda_line or version_cmp(cuda, cuda_line) < 0)
    ]
    if fitting:
        _, cuda, need = max(fitting)
        advice += f", or use the CUDA {cuda} variant (needs driver >= {need})"
    else:
        advice += ", or use a variant for an older CUDA line whose minimum driver the host meets"
    return DriverVerdict(
        "fail",
        f"host NVIDIA driver {driver} is older than {min_driver}, the minimum for {line} "
        f"(torch.cuda.is_available() is False on it); {advice}",
    )


# --------------------------------------------------------------------------- /dev/shm


def shm_advice(shm_bytes: int | None) -> str | None:
    """A warning when /dev/shm is too small for DataLoader workers, else None."""
    if shm_bytes is None:
        return "no /dev/shm found: DataLoader workers need shared memory; start the container with --ipc=host or --shm-size=8g"
    if shm_bytes <= DOCKER_DEFAULT_SHM:
        return (
            f"/dev/shm is {shm_bytes // MIB} MiB (Docker's 64 MB default): DataLoader workers will crash "
            f"with 'bus error' on real batches; start the container with --ipc=host or --shm-size=8g"
        )
    return None


RDMA_FLAGS = "--device /dev/infiniband --cap-add IPC_LOCK --ulimit memlock=-1"
MEMLOCK_ENOUGH = 1 << 30  # NCCL registers its buffers with the NIC: a 64 KiB or 8 MiB limit is far too small


def nccl_transports(rdma: dict) -> str:
    """One line: which inter-node transports NCCL can use here (from facts.rdma_facts)."""
    devices = ", ".join(rdma.get("devices") or [])
    if not rdma.get("libibverbs"):
        return "NCCL transports: TCP sockets only (libibverbs is not in this image)"
    if str(rdma.get("ib_disable") or "0") not in ("", "0"):
        return f"NCCL transports: TCP sockets (InfiniBand/RoCE switched off by NCCL_IB_DISABLE={rdma['ib_disable']})"
    if not devices:
        return "NCCL transports: TCP sockets; no InfiniBand/RoCE device visible (rdma-core is installed for hosts that have one)"
    if not rdma.get("uverbs"):
        return (
            f"NCCL transports: TCP sockets; WARNING: RDMA device(s) {devices} on the host, but /dev/infiniband is not "
            f"passed in, so NCCL falls back to TCP: start the container with {RDMA_FLAGS}"
        )
    memlock = rdma.get("memlock")
    if memlock is not None and memlock < MEMLOCK_ENOUGH:
        return (
            f"NCCL transports: InfiniBand/RoCE ({devices}) and TCP sockets; WARNING: the memlock limit is "
            f"{memlock // 1024} KiB, too small for NCCL to register its buffers: start the container with --ulimit memlock=-1"
        )
    return f"NCCL transports: InfiniBand/RoCE ({devices}) and TCP sockets"


def human_bytes(n: int | None) -> str:
    if n is None:
        return "absent"
    if n >= 1024 * MIB:
        return f"{n / (1024 * MIB):.1f} GiB"
    return f"{n // MIB} MiB"
