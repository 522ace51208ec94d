"""Read facts about the machine and the installed stack (versions, GPUs, driver, /dev/shm).

Driver and /dev/shm readers use only the standard library, so `smoke.startup`
can use them without importing torch.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.metadata
import os
import platform
import re
import warnings
from pathlib import Path

from common import deadlines

PROC_DRIVER_VERSION = Path("/proc/driver/nvidia/version")


# --------------------------------------------------------------------------- driver (NVML)


class _NvmlMemory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def nvml_info(library: str = "libnvidia-ml.so.1") -> dict | None:
    """Driver version, CUDA driver version and GPUs from NVML, or None when NVML is absent.

    NVML ships with the driver and is mounted into containers started with
    `--gpus`; it answers without creating a CUDA context (fast).
    """
    try:
        nvml = ctypes.CDLL(library)
    except OSError:
        return None
    init = getattr(nvml, "nvmlInit_v2", None) or getattr(nvml, "nvmlInit", None)
    if init is None or init() != 0:
        return None
    try:
        buf = ctypes.create_string_buffer(96)
        driver = buf.value.decode() if nvml.nvmlSystemGetDriverVersion(buf, 96) == 0 else None
        cuda_driver = None
        value = ctypes.c_int()
        getter = getattr(nvml, "nvmlSystemGetCudaDriverVersion_v2", None) or getattr(nvml, "nvmlSystemGetCudaDriverVersion", None)
        if getter is not None and getter(ctypes.byref(value)) == 0:
            cuda_driver = f"{value.value // 1000}.{value.value % 1000 // 10}"
        gpus = []
        count = ctypes.c_uint()
        get_count = getattr(nvml, "nvmlDeviceGetCount_v2", None) or nvml.nvmlDeviceGetCount
        get_handle = getattr(nvml, "nvmlDeviceGetHandleByIndex_v2", None) or nvml.nvmlDeviceGetHandleByIndex
        if get_count(ctypes.byref(count)) == 0:
            for index in range(count.value):
                handle = ctypes.c_void_p()
                if get_handle(ctypes.c_uint(index), ctypes.byref(handle)) != 0:
                    continue
                name = ctypes.create_string_buffer(96)
                memory = _NvmlMemory()
                gpus.append(
                    {
                        "name": name.value.decode() if nvml.nvmlDeviceGetName(handle, name, 96) == 0 else "?",
                        "memory_gb": round(memory.total / 2**30, 1)
                        if nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) == 0
                        else None,
                    }
                )
        return {"driver": driver, "cuda_driver": cuda_driver, "gpus": gpus}
    finally:
        nvml.nvmlShutdown()


def parse_proc_driver_version(text: str) -> str | None:
    """'NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ...' -> '535.104.05'."""
    match = re.search(r"Kernel Module(?: for [^\s]+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    if match:
        return match.group(1)
    match = re.search(r"NVRM version:.*?\s(\d{3,}\.\d+(?:\.\d+)?)\s", text)
    return match.group(1) if match else None


def driver_version(proc_file: Path = PROC_DRIVER_VERSION) -> tuple[str | None, str]:
    """(version or None, where it came from)."""
    info = nvml_info()
    if info and info.get("driver"):
        return info["driver"], "NVML"
    try:
        found = parse_proc_driver_version(proc_file.read_text())
    except OSError:
        found = None
    return (found, str(proc_file)) if found else (None, "none")


# --------------------------------------------------------------------------- /dev/shm


def shm_bytes(path: str = "/dev/shm") -> int | None:
    """Size of the shared-memory file system, or None when there is none."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_frsize * st.f_blocks


# --------------------------------------------------------------------------- packages


def rdma_facts(sys_class: Path = Path("/sys/class/infiniband"), dev: Path = Path("/dev/infiniband")) -> dict:
    """What NCCL's InfiniBand/RoCE transport needs, as seen from here: the host's RDMA devices
    (sysfs), their verbs device nodes passed into the container, libibverbs, the memlock limit."""
    import ctypes.util
    import resource

    def names(folder: Path, pattern: str) -> list[str]:
        try:
            return sorted(p.name for p in folder.glob(pattern))
        except OSError:
            return []

    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return {
        "devices": names(sys_class, "*"),
        "uverbs": names(dev, "uverbs*"),
        "libibverbs": ctypes.util.find_library("ibverbs") is not None,
        "memlock": None if soft == resource.RLIM_INFINITY else soft,
        "ib_disable": os.environ.get("NCCL_IB_DISABLE"),
    }


def installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def import_version(module: str) -> tuple[str | None, str | None]:
    """(module.__version__, import error) — importing proves the extension loads against this torch."""
    try:
        mod = importlib.import_module(module)
    except ImportError as err:
        if installed_version(module) is None:
            return None, None  # not installed at all
        return installed_version(module), f"{module} is installed but does not import: {err}"
    except Exception as err:  # a broken extension can raise anything (OSError, RuntimeError)
        return installed_version(module), f"{module} does not import: {type(err).__name__}: {err}"
    return str(getattr(mod, "__version__", installed_version(module))), None


# --------------------------------------------------------------------------- torch


def nccl_version(torch) -> str | None:
    """torch.cuda.nccl.version() as 'x.y.z', None on builds without NCCL."""
    try:
        import torch.cuda.nccl as nccl

        value = nccl.version()
    except (AttributeError, RuntimeError, ImportError):
        return None
    if isinstance(value, tuple):
        return ".".join(str(v) for v in value[:3])
    value = int(value)  # very old torch: major*1000 + minor*100 + patch
    return f"{value // 1000}.{value // 100 % 10}.{value % 100}"


def cudnn_version(torch) -> int | None:
    try:
        if not torch.backends.cudnn.is_available():
            return None
        return torch.backends.cudnn.version()
    except (AttributeError, RuntimeError):
        return None


def cudnn_runtime_and_compiled(torch) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """(runtime, compile-time) cuDNN versions from torch._C._cudnn, when this build has them."""
    module = getattr(torch._C, "_cudnn", None)
    try:
        runtime = tuple(module.getRuntimeVersion()) if module and hasattr(module, "getRuntimeVersion") else None
        compiled = tuple(module.getCompileVersion()) if module and hasattr(module, "getCompileVersion") else None
    except RuntimeError:
        return None, None
    return runtime, compiled


def cuda_status(torch) -> tuple[bool, str | None]:
    """(torch.cuda.is_available(), the warning torch gave when it is not)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            available = bool(torch.cuda.is_available())
        except Exception as err:  # a broken driver install can raise here
            return False, f"{type(err).__name__}: {err}"
    message = next((str(w.message).strip().splitlines()[0] for w in caught), None)
    return available, message


def arch_list(torch) -> list[str]:
    """The GPU architectures this build carries kernels for ('sm_90', 'compute_90', ...).

    torch.cuda.get_arch_list() answers [] while no GPU is usable, so read the
    build's flags directly when it does.
    """
    if not torch.version.cuda:
        return []
    listed = list(torch.cuda.get_arch_list())
    if listed:
        return listed
    flags = getattr(torch._C, "_cuda_getArchFlags", None)
    try:
        return (flags() or "").split() if flags else []
    except RuntimeError:
        return []


def gpu_facts(torch) -> list[dict]:
    gpus = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        gpus.append(
            {
                "name": props.name,
                "capability": f"{props.major}.{props.minor}",
                "memory_gb": round(props.total_memory / 2**30, 1),
            }
        )
    return gpus


def collect(torch) -> dict:
    """Everything the checks and build.py need to know, as plain JSON values."""
    cuda_available, cuda_warning = cuda_status(torch)
    driver, driver_source = driver_version()
    tv, tv_error = import_version("torchvision")
    ta, ta_error = import_version("torchaudio")
    gpus = gpu_facts(torch) if cuda_available else []
    return {
        "torch": torch.__version__,
        "torch_release": str(torch.__version__).split("+", 1)[0],
        "cuda": torch.version.cuda,
        "cudnn": cudnn_version(torch),
        "nccl": nccl_version(torch),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "emulation": deadlines.emulation(),
        "torchvision": tv,
        "torchaudio": ta,
        "gpu_count": len(gpus),
        "gpus": gpus,
        "driver": driver,
        "driver_source": driver_source,
        "cuda_available": cuda_available,
        "cuda_warning": cuda_warning,
        "import_errors": [e for e in (tv_error, ta_error) if e],
        "arch_list": arch_list(torch),
        "shm_bytes": shm_bytes(),
    }
