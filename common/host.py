"""What this machine is, and how it was during a run, in the words the proof and the benchmarks
print: its CPU and the cores this process may use (`host_cpu`, `run_cores`), readings of its
CPUs (`cpu_sample`), their condition over a run and whether it was **busy** (`host_condition`,
`busy_reasons`: the one definition of "busy"), and how a speed compares with another
(`speed_words`: "1.61x slower", "2.10x faster"). Standard library only.

Busy, the one definition (docs/benchmarks.md says it too): during a run, the host was busy when
the run had less than three quarters of its cores to itself. What other work took is measured
per CPU the run may run on (/proc/stat): those CPUs' time that was neither idle nor the run's own
(the run's process and its children), plus the time the hypervisor gave them to other machines
(steal), averaged over the run's wall time, in cores. So the run had `cpus - others` cores to
itself, and it was busy when that is below 0.75 x the cores it uses: the cores it may use (its CPUs,
fewer under a cgroup CPU quota), or fewer where the run says it runs on fewer threads (a one-thread
run on two cores needs one core to itself, not one and a half). A cgroup quota that throttled the run for 10% of its wall time or more makes
it busy as well. Where /proc/stat cannot be read, the 1-minute load average stands in for the
CPU time (the larger of its readings at the start and at the end, less the cores' worth the run
itself used). The load average is printed either way, but does not decide where CPU time can:
it counts the run's own threads (torch's and ale-py's can take it past the core count on a quiet
host) and trails a minute behind.
"""

from __future__ import annotations

import math
import os
import platform
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

BUSY_OWN_SHARE = 0.75  # the run had less than this share of its cores to itself: busy
BUSY_THROTTLED_SHARE = 0.10  # a cgroup CPU quota held the run back this share of its wall time: busy
# Two figures within this share of each other are "the same": one run beside another does not tell a
# smaller difference apart from noise. A chosen bound (5%), not a measured spread.
SAME_WITHIN = 0.05


def this_machine() -> dict[str, str]:
    """{"machine": "x86_64", "system": "Linux-6.1-...-glibc2.36"}: what a report's and the run facts' `host` say
    of the machine a build ran on."""
    return {"machine": platform.machine(), "system": platform.platform()}


def host_cpu() -> str:
    """'AMD EPYC 7B13, 2 cores' (the cores this process may use)."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = run_cores()
    return f"{model}, {cores} core{'s' if cores != 1 else ''}"


def run_cpus() -> list[int]:
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def _cgroup_dirs() -> list[Path]:
    """This process's cgroup folders (v2, then v1's cpu controller), most specific first."""
    dirs = []
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            rel = path.lstrip("/")
            if controllers == "":
                dirs += [Path("/sys/fs/cgroup") / rel, Path("/sys/fs/cgroup")]
            elif "cpu" in controllers.split(","):
                for mount in ("cpu,cpuacct", "cpu"):
                    dirs += [Path("/sys/fs/cgroup") / mount / rel, Path("/sys/fs/cgroup") / mount]
    except (OSError, ValueError):
        pass
    return [d for d in dict.fromkeys(dirs) if d.is_dir()]


def cpu_quota() -> float | None:
    """The cgroup's CPU quota in cores (docker --cpus, a Kubernetes limit), or None without one."""
    for folder in _cgroup_dirs():
        try:
            if (folder / "cpu.max").is_file():
                quota, period = (folder / "cpu.max").read_text().split()[:2]
                return None if quota == "max" else int(quota) / int(period)
            if (folder / "cpu.cfs_quota_us").is_file():
                quota = int((folder / "cpu.cfs_quota_us").read_text())
                return None if quota < 0 else quota / int((folder / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
    return None


def run_cores() -> int:
    """The cores this process may use: its CPUs, fewer under a cgroup CPU quota."""
    cpus = len(run_cpus())
    quota = cpu_quota()
    return max(1, min(cpus, math.ceil(quota))) if quota else cpus


def _throttled_seconds() -> float | None:
    """Seconds the cgroup's CPU quota has held this process's cgroup back so far (cpu.stat)."""
    for folder in _cgroup_dirs():
        try:
            fields = dict(line.split() for line in (folder / "cpu.stat").read_text().splitlines() if line.strip())
        except (OSError, ValueError):
            continue
        if "throttled_usec" in fields:  # cgroup v2
            return int(fields["throttled_usec"]) / 1e6
        if "throttled_time" in fields:  # cgroup v1, nanoseconds
            return int(fields["throttled_time"]) / 1e9
    return None


def _own_cpu_seconds(root: int | None = None) -> float:
    """CPU seconds of process `root` (default: this one) and of the processes below it that still run:
    a torchrun job's ranks are one run when `root` is their launcher."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    if root is None or root == os.getpid():
        times = os.times()
        own, root = times.user + times.system + times.children_user + times.children_system, os.getpid()
    else:
        own = _process_cpu_seconds(root, ticks) or 0.0
    try:
        from common.procs import descendants

        own += sum(_process_cpu_seconds(pid, ticks) or 0.0 for pid in descendants(root))
    except OSError:
        pass
    return own


def _process_cpu_seconds(pid: int, ticks: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    except (OSError, ValueError, IndexError):
        return None


def _proc_stat(cpus: list[int]) -> tuple[float, float] | None:
    """(seconds busy, seconds stolen) so far, summed over `cpus`, from /proc/stat; None where unreadable."""
    try:
        ticks = os.sysconf("SC_CLK_TCK")
        lines = Path("/proc/stat").read_text().splitlines()
    except (OSError, ValueError, AttributeError):
        return None
    wanted = {f"cpu{n}" for n in cpus}
    busy = steal = 0.0
    found = 0
    for line in lines:
        name, *values = line.split()
        if name not in wanted:
            continue
        v = [int(x) for x in values] + [0] * 10
        busy += v[0] + v[1] + v[2] + v[5] + v[6]  # user nice system irq softirq (guest is inside user)
        steal += v[7]
        found += 1
    return (busy / ticks, steal / ticks) if found == len(wanted) else None


def load_average() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


@dataclass(frozen=True)
class CpuSample:
    """One reading of the CPUs this process may run on."""

    at: float  # time.monotonic()
    load1: float | None  # the 1-minute load average
    busy: float | None  # seconds those CPUs have been busy (not idle, not stolen) so far; None: unreadable
    steal: float | None  # seconds the hypervisor has given them to other machines so far
    own: float  # CPU seconds of this process and its children so far
    throttled: float | None  # seconds the cgroup's CPU quota has held it back so far; None: no quota accounting


def cpu_sample(own_root: int | None = None) -> CpuSample:
    """A reading now; the run's own CPU time is that of `own_root` (default: this process) and what runs below it."""
    stat = _proc_stat(run_cpus())
    return CpuSample(
        at=time.monotonic(),
        load1=load_average(),
        busy=stat[0] if stat else None,
        steal=stat[1] if stat else None,
        own=_own_cpu_seconds(own_root),
        throttled=_throttled_seconds(),
    )


@dataclass(frozen=True)
class HostCondition:
    """The host over a run, from a reading at its start and one at its end."""

    cpus: int  # the CPUs the run may run on
    cores: int  # the cores' worth it may use (fewer than cpus under a quota)
    wall_seconds: float
    load1_start: float | None
    load1_end: float | None
    own_cores: float  # the cores' worth of CPU the run itself used, on average
    others_cores: float | None  # the cores' worth other work took from those CPUs (steal included); None: unreadable
    steal_share: float | None  # share of those CPUs' time the hypervisor gave to other machines
    throttled_share: float | None  # share of the wall time the cgroup's quota held the run back
    threads: int | None = None  # the threads the run computes on, where it knows them; None: as many as its cores

    @property
    def uses(self) -> int:
        """The cores the run can keep busy: its cores, or its threads where those are fewer."""
        return max(1, min(self.cores, self.threads or self.cores))

    def to_json(self) -> dict:
        """Its fields, with the verdict: `busy` and `busy_reasons`."""
        reasons = busy_reasons(self)
        return {**asdict(self), "busy": bool(reasons), "busy_reasons": reasons}

    @classmethod
    def from_json(cls, record: dict) -> HostCondition:
        return cls(**{f.name: record.get(f.name) for f in fields(cls)})


def host_condition(
    start: CpuSample, end: CpuSample, cpus: int | None = None, cores: int | None = None, threads: int | None = None
) -> HostCondition:
    """The host over a run, from its readings; `threads`: the threads the run computes on, where it knows them."""
    cpus = cpus or len(run_cpus())
    cores = cores or run_cores()
    wall = max(end.at - start.at, 1e-9)
    own = max(end.own - start.own, 0.0)
    others = steal_share = None
    if None not in (start.busy, end.busy, start.steal, end.steal):
        stolen = max(end.steal - start.steal, 0.0)
        others = max(end.busy - start.busy - own, 0.0) + stolen
        steal_share = stolen / (wall * cpus)
    throttled = None if None in (start.throttled, end.throttled) else max(end.throttled - start.throttled, 0.0) / wall
    return HostCondition(
        cpus=cpus,
        cores=cores,
        wall_seconds=wall,
        load1_start=start.load1,
        load1_end=end.load1,
        own_cores=own / wall,
        others_cores=None if others is None else others / wall,
        steal_share=steal_share,
        throttled_share=throttled,
        threads=threads,
    )


def busy_reasons(c: HostCondition) -> list[str]:
    """Why the host counts as busy during the run (the module's docstring has the rule); [] when quiet."""
    reasons = []
    if c.others_cores is not None:
        others, said = c.others_cores, f"other work took {c.others_cores:.2f} of the {c.cpus} CPUs"
    else:
        loads = [x for x in (c.load1_start, c.load1_end) if x is not None]
        others = max(max(loads) - c.own_cores, 0.0) if loads else None
        said = (
            f"the 1-minute load average, {max(loads) if loads else 0:.2f} less the run's own {c.own_cores:.2f}, on {c.cpus} CPUs"
        )
    if others is not None:
        uses = c.uses
        to_itself = min(c.cpus - others, uses)
        if to_itself < BUSY_OWN_SHARE * uses:
            of = (
                f"its {c.cores} cores"
                if uses == c.cores
                else f"the {uses} core{'s' if uses != 1 else ''} it uses ({c.threads} thread{'s' if c.threads != 1 else ''})"
            )
            reasons.append(f"{said}, leaving the run {max(to_itself, 0):.2f} of {of}")
    if c.throttled_share is not None and c.throttled_share >= BUSY_THROTTLED_SHARE:
        reasons.append(f"the cgroup's CPU quota held it back {c.throttled_share:.0%} of the time")
    return reasons


def condition_text(c: HostCondition) -> str:
    """'2 cores; 1-minute load 0.31 at the start, 2.05 at the end; the run used 1.93 cores, other work 0.04 (steal 0%): quiet'"""

    def load(x: float | None) -> str:
        return "?" if x is None else f"{x:.2f}"

    cores = f"{c.cores} core{'s' if c.cores != 1 else ''}" + (f" (of {c.cpus} CPUs)" if c.cpus != c.cores else "")
    if c.uses != c.cores:
        cores += f", {c.threads} thread{'s' if c.threads != 1 else ''} used"
    parts = [cores, f"1-minute load {load(c.load1_start)} at the start, {load(c.load1_end)} at the end"]
    used = f"the run used {c.own_cores:.2f} cores"
    if c.others_cores is not None:
        used += f", other work {c.others_cores:.2f} (steal {c.steal_share:.0%})"
    parts.append(used)
    if c.throttled_share:
        parts.append(f"throttled by the CPU quota {c.throttled_share:.0%} of the time")
    reasons = busy_reasons(c)
    return "; ".join(parts) + (f": BUSY ({'; '.join(reasons)})" if reasons else ": quiet")


def speed_words(ratio: float, lower_is_better: bool = False) -> str:
    """This run's figure over the reference's, in the same words whatever the figure: '1.61x slower',
    '2.10x faster', and '1.02x faster: the same within 5%' within SAME_WITHIN. `lower_is_better` for times
    (seconds to a target)."""
    if not ratio or ratio <= 0 or math.isinf(ratio) or math.isnan(ratio):
        return "no ratio"
    faster = ratio < 1 if lower_is_better else ratio > 1
    factor = max(ratio, 1 / ratio)
    words = f"{factor:.2f}x" if f"{factor:.2f}" == "1.00" else f"{factor:.2f}x {'faster' if faster else 'slower'}"
    if factor - 1 <= SAME_WITHIN:
        return f"{words}: the same within {SAME_WITHIN:.0%}"
    return words
