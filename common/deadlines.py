"""Every wait of the project, the image's and the host's, from one table, and whether this process runs
under emulation (which stretches the image's). The host's pipeline reads the same scale for the stages
it runs in an emulated image. Standard library only.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

EMULATION_SCALE = 4.0  # deadlines under qemu: emulated Python runs 10-100x slower (docs/benchmarks.md)

# Every wait of the code in the image, in seconds on a native host. Each is read through
# wait_for(name), which stretches it EMULATION_SCALE times under emulation; no other module
# of smoke/, ppo_bench/ or rlhf_bench/ writes a number of seconds down (tests/unit/test_smoke_deadlines.py holds it to that).
DEADLINES: dict[str, float] = {
    # the distributed check: torchrun and its ranks, start to finish; each rank gets half of it
    # for init and for each collective, so a stalled rank says so before the launcher is stopped
    "distributed": 120.0,
    # a rank's destroy_process_group (dist_worker.tear_down), within the rank's own half
    "dist_teardown": 10.0,
    # the shm check: its child (smoke.shm_worker: import torch, a DataLoader with 2 workers), start to
    # finish; the child's DataLoader waits half of it for any one batch (60 s native, as it always did)
    "shm": 120.0,
    # proof's PPO gate and a flavor's gate, each (--ppo-timeout's default)
    "ppo_gate": 900.0,
    # a command stopped at its deadline: from SIGTERM to SIGKILL (procs.run_bounded, procs.stop_tree)
    "stop_grace": 10.0,
    # stopping on the way out (an error or Ctrl-C while waiting, a command's exit): from SIGTERM to SIGKILL
    "quick_stop": 2.0,
    # The host's pipeline (pipeline.hostprocs runs each host command at most this long, then stops it with its
    # children; generous: a cold build of a torch line is 3-15 minutes native, about an hour under qemu):
    "docker build": 4 * 3600,
    "docker push": 2 * 3600,  # per tag, through the SDK (checked between progress events)
    "skopeo copy": 2 * 3600,
    "skopeo inspect": 300,
    "docker manifest": 300,
    "uv pip compile": 600,
    "git": 10,
    "docker probe": 30,  # `docker version`, `buildx version`, `nvidia-smi -L`
    # and its waits on the network (pipeline.registry, pipeline.listing, pipeline.lock)
    "layer read": 3600,  # build.py rebuild: the pushed layers that differ, read to name their files
    "diffoscope": 600,  # build.py rebuild: diffoscope's report on the files that differ
    "verify": 30,  # everything one registry command asks of registries (--timeout)
    "index probe": 5,  # `build.py list --here`: one wheel index asked whether it answers
    "pypi answer": 60,  # `build.py lock`: PyPI's JSON about one package an [overrides] entry works around
    "registry request": 30,  # one registry request, to connect or to send its next bytes
}


def deadline(seconds: float, emulated: bool | None = None) -> float:
    """`seconds`, or EMULATION_SCALE times that under emulation (`emulated`; None: find out)."""
    if emulated is None:
        emulated = emulation() is not None
    return seconds * (EMULATION_SCALE if emulated else 1.0)


def wait_for(name: str, emulated: bool | None = None) -> float:
    """The seconds DEADLINES[name] allows here: scaled under emulation (`emulated`; None: find out)."""
    return deadline(DEADLINES[name], emulated)


def emulated_on_x86(machine: str) -> str:
    """How emulation is said, here and by the pipeline that tells `proof` (PROVEN_TORCH_EMULATED)."""
    return f"{machine} under emulation (qemu) on an x86_64 CPU"


def emulation(machine: str | None = None, cpuinfo: str | None = None) -> str | None:
    """'aarch64 under emulation (qemu) on an x86_64 CPU' when this userspace runs on another architecture's
    CPU through qemu (which passes the host's /proc/cpuinfo through), else None. PROVEN_TORCH_EMULATED says
    so too, for a qemu that imitates the guest's cpuinfo."""
    machine = machine or platform.machine()
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    x86_cpu = any(line.startswith("vendor_id") for line in cpuinfo.splitlines())
    if x86_cpu and machine not in ("x86_64", "i686", "i386"):
        return emulated_on_x86(machine)
    return os.environ.get("PROVEN_TORCH_EMULATED") or None
