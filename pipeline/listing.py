"""What `build.py list` shows: the variant matrix as a table for people, as the README's
Markdown table, as JSON for CI, and the single answers scripts ask for (the default line,
a platform's base image, the host's pins); with --here, whether this host can build each line.
Each function returns text; build.py prints it.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime as dt
import json
from pathlib import Path

from common.deadlines import DEADLINES
from common.rules import advisory_age, carried_text
from pipeline.errors import PipelineError, UsageError
from pipeline.variants import Matrix, Variant, arch, pypi_alternatives


def carried_advisories(matrix: Matrix) -> dict[str, dict]:
    """Per variant: every known advisory it carries, whole lock (the snapshot and allowlist's view).
    The audit (cvss, packaging) is imported here: `list --json`, `--default`, `--pin` run on bare python3."""
    from pipeline.validation import audit

    return audit.disclosures(matrix.every_variant())


def _listed(matrix: Matrix) -> list[Variant]:
    """The base variants, each followed by its flavors (a flavor's note says what it adds)."""
    out = []
    for v in matrix.variants:
        out.append(v)
        for f in (fv for fv in matrix.flavored_variants() if fv.base_name == v.name):
            adds = ", ".join(f"{name} {version}" for name, version in f.flavor_packages)
            out.append(dataclasses.replace(f, note=f"{f.flavor} flavor of {v.name}: adds {adds}"))
    return out


def variant_table_markdown(matrix: Matrix) -> str:
    """The README's variant table, made from the matrix (a unit test keeps the README in step)."""
    carried = carried_advisories(matrix)
    as_of = next(iter(carried.values()))["as_of"]
    rows = [
        "| variant | CUDA | torch | torchvision | torchaudio | Python | min. driver | platforms "
        f"| known advisories, whole lock (as of {as_of}) | builds from | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in _listed(matrix):
        name = (f"**{v.name}** (default)" if v.is_default else v.name) + _mark(matrix, v)
        rows.append(
            f"| {name} | {v.cuda} | {v.torch} | {v.torchvision} | {v.torchaudio} | {v.python} | {v.min_driver} | {_arches(v)} | {_scoped(carried[v.name])} "
            f"| {_source(v, carried[v.name])} | {v.note} |"
        )
    return "\n".join(rows + ["", *_footnotes(matrix)] if _footnotes(matrix) else rows)


def _noted(matrix: Matrix) -> list[Variant]:
    """The lines whose pins need a word: a package that is not at torch's own release."""
    return [v for v in matrix.variants if v.pins_note]


def _mark(matrix: Matrix, variant: Variant) -> str:
    noted = [v.name for v in _noted(matrix)]
    return f" [{noted.index(variant.name) + 1}]" if variant.name in noted and not variant.flavored else ""


def _footnotes(matrix: Matrix) -> list[str]:
    return [f"[{i}] {v.name}: {v.pins_note}." for i, v in enumerate(_noted(matrix), 1)]


def variant_table_text(matrix: Matrix, here: dict | None = None) -> str:
    """`build.py list`: the matrix for a terminal, each line with how it builds, its platforms and what it carries;
    `here` (probe's answers): whether this host can build each line."""
    carried = carried_advisories(matrix)
    rows = [f"{'variant':15} {'CUDA':5} {'torch':7} {'torchvision':12} {'torchaudio':11} {'Python':7} {'driver>=':10} index"]
    for v in _listed(matrix):
        star = "*" if v.is_default else " "
        rows.append(
            f"{v.name + star + _mark(matrix, v):15} {v.cuda:5} {v.torch:7} {v.torchvision:12} {v.torchaudio:11} {v.python:7} {v.min_driver:10} {v.index}"
        )
        if here is not None and v.name in here:
            rows.append(f"{'':15} buildable here: {here[v.name].line()}")
        rows.append(f"{'':15} builds from: {_source(v, carried[v.name])}")
        rows.append(f"{'':15} platforms: {_arches(v)}" + (f" ({v.platforms_note})" if v.platforms_note else ""))
        rows.append(f"{'':15} advisories, {carried[v.name]['audited']}: {carried_text(carried[v.name])}")
        if v.note:
            rows.append(f"{'':15} note: {v.note}")
    first = next(iter(carried.values()))
    age = advisory_age(first["as_of"], dt.date.today())
    age += "; `build.py advisories --from DIR|ZIP` refreshes it" if "stale" in age else ""  # this reader builds
    rows.append(
        f"* default; advisories: every severity, the build's audit over each line's whole lock (pins only where a "
        f"line has no committed lock), {age} (images/advisories/); high and critical "
        "accepted in images/audit-allowlist.toml"
    )
    rows += _footnotes(matrix)
    rows.append(signing_line())
    return "\n".join(rows)


def signing_line() -> str:
    """Whether this host's pushes are signed: PROVEN_TORCH_SIGN_KEY names a key, or they are unsigned."""
    from pipeline import attest

    source = attest.key_source(None)
    if source is None:
        return (
            "signing: unsigned (pushes carry no signed statements; build.py keygen DIR, then --sign-key or PROVEN_TORCH_SIGN_KEY)"
        )
    try:
        return f"signing: pushes are signed with key {attest.check_key(source)[:16]}… (PROVEN_TORCH_SIGN_KEY, read by the signer)"
    except PipelineError as err:
        return f"signing: unsigned: PROVEN_TORCH_SIGN_KEY is set but unusable: {err}"


def _arches(variant: Variant) -> str:
    """'amd64, arm64': the architectures the line is built for."""
    return ", ".join(arch(p) for p in variant.platforms)


def _source(variant: Variant, section: dict) -> str:
    """Where the line's wheels come from, and whether a hash lock is committed for it."""
    locked = _whole_lock(section)
    return f"{variant.builds_from}, {'hash-locked' if locked else 'no committed lock (pins)'}"


def _scoped(section: dict) -> str:
    """What a line carries, marked where only its pins were audited (no committed lock)."""
    text = carried_text(section)
    return text if _whole_lock(section) else f"{text} (pins only: no committed lock)"


def _whole_lock(section: dict) -> bool:
    from pipeline.validation.audit import WHOLE_LOCK  # with the audit: only the table paths need it

    return section["audited"] == WHOLE_LOCK


def matrix_json(matrix: Matrix, here: dict | None = None) -> str:
    """The variant matrix as JSON for CI (GitHub Actions reads it with fromJSON): one entry per
    variant and per flavor of a variant (build it with --cuda, --torch and --flavor), with the
    platforms it is built for (the release builds a multi-arch line's arm64 image on an Arm runner)."""
    return json.dumps(
        [
            {
                "variant": v.name,
                "cuda": v.cuda,
                "torch": v.torch_minor,
                "flavor": v.flavor,
                "default": v.is_default,
                "platforms": list(v.platforms),
                "multi_arch": v.multi_arch,
                **({"pins_note": v.pins_note} if v.pins_note else {}),
                **({"here": dataclasses.asdict(here[v.name])} if here is not None and v.name in here else {}),
            }
            for v in matrix.every_variant()
        ],
        separators=(",", ":"),
    )


def default_variant(matrix: Matrix) -> str:
    """The default variant's name: what scripts build by default (images/expect/<this>.json, its CUDA line's Dockerfile)."""
    return next(v.name for v in matrix.variants if v.is_default)


def pin_lines(matrix: Matrix, names: list[str]) -> str:
    """The matrix's requirement line for each package of [packages] or a flavor's, or every line of a
    flavor a name names: the host tools that must match the image (the unit tests run the image's
    gymnasium and TRL)."""
    flavors = {flavor.name: dict(flavor.packages) for flavor in matrix.flavors}
    versions = dict(matrix.packages) | {name: v for packages in flavors.values() for name, v in packages.items()}
    lines = []
    for name in names:
        if name not in versions and name not in flavors:
            raise UsageError(f"--pin {name}: not a package or flavor of images/variants.toml (packages: {', '.join(versions)})")
        lines += [f"{n}=={v}" for n, v in flavors.get(name, {name: versions.get(name)}).items()]
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Here:
    """`list --here`: can this host build a line, and if not, why and what to do."""

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


def probe(matrix: Matrix, ca_cert: Path | None) -> dict[str, Here]:
    """Each line's answer, by name: the same checks `build.py build` makes before it builds (the wheel index's
    reach, qemu for another platform, Docker), and what it would validate on (a GPU, or the CPU only). Probed only
    when asked; every probe bounded (DEADLINES "index probe", each distinct index once, at the same time)."""
    from pipeline import build_image, docker_env  # build_image reads the audit: `list` alone runs on bare python3
    from pipeline.request import emulation_problem, host_platform

    indexes = sorted({v.index for v in matrix.variants if not v.uses_pypi})  # a flavor's is its base line's
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
    for v in matrix.every_variant():
        platforms = {
            arch(p): "yes" if p == host else (f"no: {why}" if (why := emulation_problem(p)) else "yes, under qemu")
            for p in v.platforms
        }
        if docker:
            why, fix = f"no Docker here ({docker})", "run `bash scripts/prepare-host.sh`"
        elif (unreachable := reach.get(v.index)) is not None:
            why = f"its wheel index {v.index} is unreachable from this host ({unreachable})"
            fix = "the release workflow builds it (.github/workflows/release.yml), or a host that reaches the index; "
            fix += pypi_alternatives(matrix, v)  # as the build's own refusal says it
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
