"""Can this host build a line, and if not, why and what to do (`build.py list --here`): the same checks
`build.py build` makes before it builds (the wheel index's reach, qemu for another platform, Docker),
and what it would validate on (a GPU, or the CPU only). Probed only when asked; every probe bounded
(common.deadlines.DEADLINES "index probe", each distinct index once, at the same time)."""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass
from pathlib import Path

from common.deadlines import DEADLINES
from pipeline import build_image, docker_env
from pipeline.errors import PipelineError
from pipeline.request import emulation_problem, host_platform
from pipeline.variants import Matrix, Variant, arch


@dataclass(frozen=True)
class Here:
    buildable: bool
    why: str  # why not, or "" when nothing stands in the way
    fix: str  # what to do about it
    platforms: dict[str, str]  # arch -> "yes" or why not
    validates_on: str  # "a GPU" or "the CPU only"
    built: str = ""  # its moving tag when an image of it is on this host (a validated build tagged it)
    next: str = ""  # the command to run next: the Lab in the image built, or the build that makes it

    def line(self) -> str:
        where = (f"; built here: {self.built}" if self.built else "") + (f"; next: `{self.next}`" if self.next else "")
        if not self.buildable:
            return f"no: {self.why}; {self.fix}; validates on {self.validates_on}{where}"
        others = [f"{a}: {w}" for a, w in self.platforms.items() if w.startswith("no")]
        return "yes" + (f" ({'; '.join(others)}; {self.fix})" if others else "") + f"; validates on {self.validates_on}{where}"


def probe(matrix: Matrix, variants: list[Variant], ca_cert: Path | None) -> dict[str, Here]:
    """Each variant's answer, by name."""
    indexes = sorted({v.index for v in variants if not v.uses_pypi})
    with concurrent.futures.ThreadPoolExecutor(max(1, len(indexes))) as pool:
        probes = pool.map(lambda i: build_image.index_unreachable(i, ca_cert, DEADLINES["index probe"]), indexes)
        reach = dict(zip(indexes, probes, strict=True))
    try:
        tags = {t for image in docker_env.docker_client().images.list(name=matrix.name) for t in image.tags}
        docker = ""
    except PipelineError as err:
        docker, tags = str(err), set()
    gpus = docker_env.host_gpu_count()
    validates_on = (
        f"{gpus} GPU(s)"
        if gpus
        else "the CPU only (no GPU here: --push needs --allow-cpu-validation, and a build run with REQUIRE_GPU=1 stops at once)"
    )
    host = host_platform()
    out = {}
    for v in variants:
        platforms = {
            arch(p): "yes" if p == host else (f"no: {why}" if (why := emulation_problem(p)) else "yes, under qemu")
            for p in v.platforms
        }
        if docker:
            why, fix = f"no Docker here ({docker})", "run `bash scripts/prepare-host.sh`"
        elif (unreachable := reach.get(v.index)) is not None:
            why = f"its wheel index {v.index} is unreachable from this host ({unreachable})"
            fix = "the release workflow builds it (.github/workflows/release.yml), or a host that reaches the index; "
            fix += _pypi_lines(matrix, v)
        elif all(w.startswith("no") for w in platforms.values()):
            why, fix = "no platform of it runs here", "run `sudo bash scripts/prepare-host.sh --arm64`"
        else:
            others = any(w.startswith("no") for w in platforms.values())
            why, fix = "", "other platforms: `sudo bash scripts/prepare-host.sh --arm64`" if others else ""
        built = f"{matrix.name}:{v.name}" if f"{matrix.name}:{v.name}" in tags else ""
        build = f"python build.py {matrix.build_flags(v)}" if not why else ""
        run = f"docker run --rm -p 127.0.0.1:8888:8888 {built}" if built else build
        out[v.name] = Here(not why, why, fix, platforms, validates_on, built, run)
    return out


def _pypi_lines(matrix: Matrix, variant: Variant) -> str:
    others = [v.name for v in matrix.variants if v.cuda == variant.cuda and v.uses_pypi]
    return f"from PyPI alone: {', '.join(others)}" if others else "no line of this CUDA version builds from PyPI alone"
