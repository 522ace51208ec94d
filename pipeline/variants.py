"""Load the variant matrix (images/variants.toml) and resolve a request to one variant."""

from __future__ import annotations

import dataclasses
import re
import tomllib
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import MatrixError, UsageError

REPO_ROOT = Path(__file__).resolve().parent.parent
MATRIX_PATH = REPO_ROOT / "images" / "variants.toml"

BASE = "base"  # the flavor name of a line without a flavor
UNLOCKED = "unlocked"  # [gymnasium.left_out] key: the lines without a committed lock (pip, no overrides)

# The platforms a line may list, and what each is called where: Docker's platform,
# Docker's architecture name (BuildKit's TARGETARCH, the lock folder), the machine name
# (`uname -m`, wheel tags), and docker-library's per-architecture repository prefix.
AMD64, ARM64 = "linux/amd64", "linux/arm64"
PLATFORMS = {
    AMD64: {"arch": "amd64", "machine": "x86_64", "library": "amd64"},
    ARM64: {"arch": "arm64", "machine": "aarch64", "library": "arm64v8"},
}


def arch(platform: str) -> str:
    """'linux/arm64' -> 'arm64': the lock folder, the per-architecture tag suffix, BuildKit's TARGETARCH."""
    return PLATFORMS[platform]["arch"]


@dataclass(frozen=True)
class PpoGate:
    env_id: str
    backend: str
    target_return: float
    total_timesteps: int
    seed: int


@dataclass(frozen=True)
class Override:
    """[overrides]: a requirement of another package the lock replaces (uv's --overrides), and why.
    `conflict` is what pip check then says of `package`, the one finding the image accepts for it."""

    requirement: str  # as uv reads it, e.g. "pillow>=12"
    reason: str
    package: str = ""  # the package whose requirement it replaces ("" when it removes one outright)
    conflict: str = ""  # that package's own requirement, e.g. "pillow<12.0,>=9.2.0"
    link: str = ""  # upstream's issue or change that lets it go


@dataclass(frozen=True)
class Variant:
    """One CUDA line of the matrix, with everything the build and the checks need."""

    name: str  # "2.9-cu128": torch line and CUDA line, as its moving tag
    cuda: str  # "12.8"
    torch: str
    torchvision: str
    torchaudio: str
    index: str
    cudnn: int
    nccl: str
    min_driver: str
    size_budget_gb: float
    note: str
    # copied from [project] / [packages] so a Variant is self-contained
    python: str
    base_image: str  # report.json's pins name it
    base_suite: str
    packages: tuple[tuple[str, str], ...]
    ppo_gate: PpoGate
    is_default: bool
    driver_lines: tuple[tuple[str, str], ...] = ()  # (CUDA line, min driver) of every variant
    # A flavor ("rlhf") is its base variant plus a layer of its own: name "2.9-cu128-rlhf",
    # base_name "2.9-cu128", its extra pins, and its gate's settings (rlhf_bench's options).
    flavor: str = BASE  # or a flavor of [flavors], e.g. "rlhf"
    base_name: str = ""
    flavor_packages: tuple[tuple[str, str], ...] = ()
    flavor_gate: tuple[tuple[str, object], ...] = ()
    # The platforms the line is built for (images/variants.toml `platforms`), and where it has
    # one only, why (`platforms_note`: no CUDA wheel of the line's torch for the other).
    platforms: tuple[str, ...] = (AMD64,)
    platforms_note: str = ""
    # Why a package's pin is not torch's own release (`pins_note`): `build.py list` footnotes it.
    pins_note: str = ""
    # gymnasium's extras ([gymnasium] extras), those a platform or an unlocked line leaves out with
    # the reason ({platform or "unlocked": {extra: reason}}), and the lock's overrides.
    gymnasium_extras: tuple[str, ...] = ()
    extras_left_out: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    overrides: tuple[Override, ...] = ()

    @property
    def multi_arch(self) -> bool:
        return len(self.platforms) > 1

    @property
    def flavored(self) -> bool:
        """A flavor of a base line (its own layer on top of the base image), not the base line itself."""
        return self.flavor != BASE

    @property
    def moving_tags(self) -> list[str]:
        """The tags that move to each new validated build: the line's name; the default base line's, `latest` too."""
        return [self.name] + (["latest"] if self.is_default else [])

    @property
    def torch_minor(self) -> str:
        return ".".join(self.torch.split(".")[:2])

    def pins(self) -> list[tuple[str, str]]:
        """Every Python package the line pins: torch, torchvision, torchaudio, [packages], then its flavor's."""
        base = [("torch", self.torch), ("torchvision", self.torchvision), ("torchaudio", self.torchaudio), *self.packages]
        return base + list(self.flavor_packages)

    def left_out(self, platform: str = AMD64, locked: bool = True) -> dict[str, str]:
        """{extra: why} of gymnasium's extras this line leaves out on `platform` (unlocked: pins only)."""
        tables = dict(self.extras_left_out)
        return dict(tables.get(platform, ())) | ({} if locked else dict(tables.get(UNLOCKED, ())))

    def extras(self, platform: str = AMD64, locked: bool = True) -> tuple[str, ...]:
        """gymnasium's extras the line installs on `platform`."""
        gone = self.left_out(platform, locked)
        return tuple(e for e in self.gymnasium_extras if e not in gone)

    def requirement(self, name: str, version: str, platform: str = AMD64, locked: bool = True) -> str:
        """name==version, gymnasium with the extras the line installs there: gymnasium[mujoco,...]==1.4.0."""
        extras = self.extras(platform, locked) if name == "gymnasium" else ()
        return f"{name}[{','.join(extras)}]=={version}" if extras else f"{name}=={version}"

    @property
    def uses_pypi(self) -> bool:
        return "pypi.org" in self.index

    @property
    def builds_from(self) -> str:
        """How the line can be built: 'PyPI alone' or 'PyTorch's index (HOST/PATH) and PyPI'."""
        if self.uses_pypi:
            return "PyPI alone"
        return f"PyTorch's index ({self.index.split('://', 1)[-1]}) and PyPI"

    def index_args(self) -> list[str]:
        """pip's index options for this line: its wheel index, plus PyPI for what PyTorch's per-CUDA
        indexes do not mirror (JupyterLab and the rest)."""
        return ["--index-url", self.index] + ([] if self.uses_pypi else ["--extra-index-url", "https://pypi.org/simple"])

    def expectations(self) -> dict:
        """What the smoke checks inside the image must find (smoke/expect.py's schema)."""
        pins = ("torch", "torchvision", "torchaudio", "cuda", "cudnn", "nccl", "python", "min_driver")
        return {"variant": self.name, **{key: getattr(self, key) for key in pins}, "driver_lines": dict(self.driver_lines)}

    def spec(self) -> dict:
        """What the image must prove, baked into it as /opt/proven-torch/expect.json:
        the expectations of the smoke suite and the settings of the PPO gate."""
        spec = {
            "schema": 1,
            "generated_by": "python build.py render (from images/variants.toml)",
            "variant": self.name,
            "expect": self.expectations(),
            "ppo_gate": dataclasses.asdict(self.ppo_gate),
        }
        if self.flavored:
            spec["flavor"] = self.flavor
            spec[f"{self.flavor}_gate"] = dict(self.flavor_gate)
        return spec


@dataclass(frozen=True)
class Flavor:
    """[flavors.NAME]: packages on top of a base variant, the lines that have it, its gate."""

    name: str
    description: str
    lines: tuple[str, ...]
    size_budget_extra_gb: float
    packages: tuple[tuple[str, str], ...]
    gate: tuple[tuple[str, object], ...]


@dataclass(frozen=True)
class Matrix:
    path: Path
    name: str
    default_cuda: str
    base_image: str
    base_suite: str
    python: str
    user: str
    uid: int
    gid: int
    resolved_before: str
    packages: tuple[tuple[str, str], ...]
    ppo_gate: PpoGate
    variants: tuple[Variant, ...]
    flavors: tuple[Flavor, ...] = ()

    def flavored(self, variant: Variant, flavor: str) -> Variant:
        """The `flavor` of a base variant, refused with one line when the matrix has no such pair."""
        if flavor == BASE:
            return variant
        found = next((f for f in self.flavors if f.name == flavor), None)
        if found is None:
            names = ", ".join([BASE, *(f.name for f in self.flavors)])
            raise UsageError(f"unknown flavor {flavor!r}; the matrix has {names}")
        if variant.name not in found.lines:
            raise UsageError(
                f"the {flavor} flavor is made for {', '.join(found.lines)} (where its layer is locked), not {variant.name}; "
                f"add the line to [flavors.{flavor}] lines and run `build.py lock --flavor {flavor}` where its index is reachable"
            )
        return dataclasses.replace(
            variant,
            name=f"{variant.name}-{flavor}",
            flavor=flavor,
            base_name=variant.name,
            is_default=False,
            size_budget_gb=variant.size_budget_gb + found.size_budget_extra_gb,
            flavor_packages=found.packages,
            flavor_gate=found.gate,
            note=found.description,
        )

    def flavored_variants(self) -> list[Variant]:
        """Every (line, flavor) pair the matrix lists, flavors only."""
        return [self.flavored(self.by_name(line), f.name) for f in self.flavors for line in f.lines]

    def every_variant(self) -> list[Variant]:
        """The base variants, then every flavor of a line: every line the matrix builds."""
        return [*self.variants, *self.flavored_variants()]

    def line(self, name: str) -> Variant:
        """A line by its name, a flavor's ("2.9-cu128-rlhf") too (by_name: a base line only)."""
        return _named(self.every_variant(), name, "line")

    def base_image_for(self, platform: str) -> str:
        """The base image for `platform`: the matrix's name for amd64; docker-library's per-architecture
        repository otherwise (arm64v8/debian:bookworm-slim), which a host without a registry makes itself
        (scripts/prepare-host.sh --arm64). One local name per architecture: Docker 20.10's image store
        holds one image per tag."""
        if platform == AMD64:
            return self.base_image
        return f"{PLATFORMS[platform]['library']}/{self.base_image}"

    def build_flags(self, variant: Variant) -> str:
        """The flags `build.py` builds `variant` with (the matrix's first torch line of a CUDA line needs no --torch)."""
        first = next(v for v in self.variants if v.cuda == variant.cuda)
        torch = "" if first.torch_minor == variant.torch_minor else f" --torch {variant.torch_minor}"
        return f"--cuda {variant.cuda}{torch}" + (f" --flavor {variant.flavor}" if variant.flavored else "")

    def by_name(self, name: str) -> Variant:
        return _named(self.variants, name, "variant")


def _named(variants: Sequence[Variant], name: str, what: str) -> Variant:
    """The variant called `name`, else one line naming every one there is."""
    found = next((v for v in variants if v.name == name), None)
    if found is None:
        raise UsageError(f"unknown {what} {name!r}; the matrix has {', '.join(v.name for v in variants)}")
    return found


def _keys(cls: type, names: str) -> dict[str, type]:
    """The fields `names` of the dataclass `cls` with their types: what its table in the matrix must hold."""
    hints = typing.get_type_hints(cls)
    return {name: hints[name] for name in names.split()}


_VARIANT_KEYS = _keys(Variant, "cuda torch torchvision torchaudio index cudnn nccl min_driver size_budget_gb")
_PROJECT_KEYS = _keys(Matrix, "name default_cuda base_image base_suite python user uid gid resolved_before")
_GATE_KEYS = typing.get_type_hints(PpoGate)


def _typed(table: dict, keys: dict, where: str, path: Path) -> dict:
    if not isinstance(table, dict):
        raise MatrixError(f"{path}: [{where}] must be a table")
    out = {}
    for key, typ in keys.items():
        if key not in table:
            raise MatrixError(f"{path}: [{where}] is missing {key!r}; add it (see the other entries)")
        value = table[key]
        if typ is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, typ) or isinstance(value, bool):
            raise MatrixError(f"{path}: [{where}] {key!r} must be a {typ.__name__}, got {value!r}")
        out[key] = value
    return out


def load_matrix(path: Path | str | None = None) -> Matrix:
    """Parse and check the matrix file; raise MatrixError naming the problem."""
    path = Path(path) if path else MATRIX_PATH
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise MatrixError(f"{path}: matrix file not found; run from a checkout of the repository") from None
    except tomllib.TOMLDecodeError as err:
        raise MatrixError(f"{path}: not valid TOML ({err}); fix the file or `git checkout` it") from None

    project = _typed(data.get("project", {}), _PROJECT_KEYS, "project", path)
    gate = PpoGate(**_typed(data.get("ppo_gate", {}), _GATE_KEYS, "ppo_gate", path))
    packages = _pins(data.get("packages", {}), "packages", path)
    extras, left_out = _gymnasium(data.get("gymnasium", {}), path)
    overrides = _overrides(data.get("overrides", {}), path)

    raw_variants = data.get("variants")
    if not isinstance(raw_variants, dict) or not raw_variants:
        raise MatrixError(f"{path}: no [variants.*] entries")
    variants = []
    for name, table in raw_variants.items():
        fields = _typed(table, _VARIANT_KEYS, f'variants."{name}"', path)
        for key in ("torch", "torchvision", "torchaudio"):
            if not re.fullmatch(r"\d+\.\d+\.\d+", fields[key]):
                raise MatrixError(f'{path}: [variants."{name}"] {key} {fields[key]!r} is not an exact X.Y.Z pin')
        expected_name = variant_name(fields["torch"], fields["cuda"])
        if name != expected_name:
            raise MatrixError(
                f'{path}: [variants."{name}"] has torch {fields["torch"]} and cuda {fields["cuda"]}; name it "{expected_name}"'
            )
        platforms, platforms_note = _platforms(table, name, path)
        variants.append(
            Variant(
                name=name,
                note=str(table.get("note", "")),
                pins_note=str(table.get("pins_note", "")),
                platforms=platforms,
                platforms_note=platforms_note,
                python=project["python"],
                base_image=project["base_image"],
                base_suite=project["base_suite"],
                packages=packages,
                ppo_gate=gate,
                is_default=False,
                gymnasium_extras=extras,
                extras_left_out=left_out,
                overrides=overrides,
                **fields,
            )
        )
    lines = tuple(dict.fromkeys((v.cuda, v.min_driver) for v in variants))
    default = next((v.name for v in variants if v.cuda == project["default_cuda"]), None)
    if default is None:
        raise MatrixError(f"{path}: default_cuda {project['default_cuda']!r} matches no variant")
    names = [v.name for v in variants]
    variants = [dataclasses.replace(v, driver_lines=lines, base_name=v.name, is_default=v.name == default) for v in variants]
    flavors = tuple(_flavor(name, table, names, path) for name, table in (data.get("flavors") or {}).items())
    return Matrix(path=path, packages=packages, ppo_gate=gate, variants=tuple(variants), flavors=flavors, **project)


def _pins(table: object, where: str, path: Path, empty: bool = True) -> tuple[tuple[str, str], ...]:
    """A table of package name -> version string, sorted."""
    if not isinstance(table, dict) or not (table or empty) or not all(isinstance(v, str) for v in table.values()):
        raise MatrixError(f"{path}: [{where}] must map package names to version strings")
    return tuple(sorted(table.items()))


def _gymnasium(table: dict, path: Path) -> tuple[tuple[str, ...], tuple[tuple[str, tuple[tuple[str, str], ...]], ...]]:
    """[gymnasium]: the extras the image claims, and {platform or "unlocked": {extra: why}} left out."""
    extras = table.get("extras", [])
    if not isinstance(extras, list) or not all(isinstance(e, str) and re.fullmatch(r"[a-z0-9-]+", e) for e in extras):
        raise MatrixError(f'{path}: [gymnasium] extras must list gymnasium\'s extra names, e.g. ["torch", "mujoco"]')
    left_out = []
    for where, reasons in (table.get("left_out") or {}).items():
        if where not in (*PLATFORMS, UNLOCKED):
            raise MatrixError(
                f"{path}: [gymnasium.left_out] {where!r} is not a platform ({', '.join(PLATFORMS)}) or {UNLOCKED!r}"
            )
        if not isinstance(reasons, dict) or not all(k in extras and isinstance(v, str) and v for k, v in reasons.items()):
            raise MatrixError(f"{path}: [gymnasium.left_out] {where!r} must map extras of [gymnasium] extras to the reason")
        left_out.append((where, tuple(reasons.items())))
    return tuple(extras), tuple(left_out)


def _overrides(table: dict, path: Path) -> tuple[Override, ...]:
    """[overrides]: requirement -> {reason, package, conflict, link}."""
    out = []
    for requirement, fields in table.items():
        if not isinstance(fields, dict) or not isinstance(fields.get("reason"), str) or not fields["reason"]:
            raise MatrixError(f"{path}: [overrides] {requirement!r} needs a reason")
        unknown = set(fields) - {"reason", "package", "conflict", "link"}
        if unknown:
            raise MatrixError(f"{path}: [overrides] {requirement!r} has unknown keys {sorted(unknown)}")
        out.append(Override(requirement=requirement, **{k: str(v) for k, v in fields.items()}))
    return tuple(out)


def _platforms(table: dict, name: str, path: Path) -> tuple[tuple[str, ...], str]:
    """A line's `platforms` (default amd64 only) and `platforms_note`, which a single-platform line must have."""
    where = f'{path}: [variants."{name}"]'
    platforms = table.get("platforms", [AMD64])
    if not isinstance(platforms, list) or not platforms or not all(p in PLATFORMS for p in platforms):
        raise MatrixError(f"{where} platforms must list some of {', '.join(PLATFORMS)}, got {platforms!r}")
    if platforms[0] != AMD64 or len(set(platforms)) != len(platforms):
        raise MatrixError(f'{where} platforms must start with "{AMD64}" and name each platform once')
    note = table.get("platforms_note", "")
    if len(platforms) == 1 and not note:
        raise MatrixError(f"{where} builds for {platforms[0]} only: say why in platforms_note")
    return tuple(platforms), str(note)


def _flavor(name: str, table: dict, variant_names: list[str], path: Path) -> Flavor:
    where = f"flavors.{name}"
    fields = _typed(table, {"description": str, "size_budget_extra_gb": float}, where, path)
    lines = table.get("lines")
    if not isinstance(lines, list) or not lines or not all(line in variant_names for line in lines):
        raise MatrixError(f"{path}: [{where}] lines must list variants of the matrix (it has {', '.join(variant_names)})")
    packages = _pins(table.get("packages"), f"{where}.packages", path, empty=False)
    gate = table.get("gate")
    if not isinstance(gate, dict):
        raise MatrixError(f"{path}: [{where}.gate] must be a table of the gate's settings")
    return Flavor(name=name, lines=tuple(lines), packages=packages, gate=tuple(gate.items()), **fields)


def pypi_alternatives(matrix: Matrix, variant: Variant) -> str:
    """What a host that reaches PyPI but not `variant`'s index can build instead, in one clause."""
    if variant.uses_pypi:
        return ""
    same = [v for v in matrix.variants if v.cuda == variant.cuda and v.uses_pypi]
    if same:
        v = same[0]
        return f"from PyPI alone this host can build CUDA {v.cuda} as {v.name} (torch {v.torch}): {matrix.build_flags(v)}"
    others = [v for v in matrix.variants if v.uses_pypi]
    names = ", ".join(f"{v.name} (driver >= {v.min_driver})" for v in others)
    return f"the matrix has no CUDA {variant.cuda} line on PyPI; from PyPI alone this host can build {names}"


def variant_name(torch: str, cuda: str) -> str:
    """torch 'X.Y.Z' and CUDA '12.8' -> 'X.Y-cu128': the torch line and the CUDA line, as the moving tag says them."""
    return ".".join(torch.split(".")[:2]) + "-" + cuda_tag(cuda)


def cuda_tag(cuda: str) -> str:
    """CUDA '12.1' -> 'cu121': the CUDA line as tags and Dockerfile names say it."""
    return "cu" + cuda.replace(".", "")


def resolve(matrix: Matrix, cuda: str | None, torch: str | None = None, flavor: str = BASE) -> Variant:
    """The variant for a requested CUDA line (and torch version), in `flavor` (see Matrix.flavored);
    UsageError saying what exists instead."""
    cuda = cuda.strip().lower() if cuda else matrix.default_cuda
    if tag := re.fullmatch(r"cu(\d+)(\d)", cuda):  # cu128 -> 12.8, cu118 -> 11.8
        cuda = f"{tag.group(1)}.{tag.group(2)}"
    lines = ", ".join(dict.fromkeys(v.cuda for v in matrix.variants))
    if not re.fullmatch(r"\d+\.\d+", cuda):
        raise UsageError(f"--cuda {cuda!r} is not a CUDA line like 12.8; choose one of: {lines}")
    by_cuda = [v for v in matrix.variants if v.cuda == cuda]
    if torch is None:
        if not by_cuda:
            raise UsageError(f"unknown CUDA line {cuda}; this matrix has {lines}")
        return matrix.flavored(by_cuda[0], flavor)  # the first listed for the line: the matrix's choice

    if not re.fullmatch(r"\d+(\.\d+){0,2}", torch.strip()):
        raise UsageError(f"--torch {torch!r} is not a version like X.Y or X.Y.Z")
    requested = torch.strip().split(".")
    with_torch = [v for v in matrix.variants if v.torch.split(".")[: len(requested)] == requested]
    match = [v for v in by_cuda if v in with_torch]
    if match:
        return matrix.flavored(match[0], flavor)
    if not with_torch:
        known = ", ".join(sorted({v.torch for v in matrix.variants}))
        raise UsageError(f"no torch {torch} in the matrix; it has torch {known}")
    has = ", ".join(v.cuda for v in with_torch)
    if by_cuda:
        newest = max(by_cuda, key=lambda v: tuple(int(p) for p in v.torch.split(".")))
        ways = [f"--cuda {cuda} builds {by_cuda[0].name}"] + [f"--torch {v.torch_minor} builds {v.name}" for v in by_cuda[1:]]
        raise UsageError(
            f"torch {torch} has no CUDA {cuda} build (torch {torch} has CUDA {has}); "
            f"the newest torch with CUDA {cuda} is {newest.torch}: {', '.join(ways)}"
        )
    raise UsageError(f"torch {torch} has no CUDA {cuda} build; torch {torch} has CUDA {has}")
