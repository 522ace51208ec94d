"""Hash-locked dependencies: one lock per variant and platform, resolved with uv, split into one
requirement file per image layer (docs/supply-chain.md, "Hash-locked dependencies", says how and why)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from common.deadlines import DEADLINES
from common.rules import normalize_name
from pipeline import hostprocs
from pipeline.errors import BuildFailed, RegistryDataRefused, RegistryUnreachable, UsageError
from pipeline.variants import AMD64, PLATFORMS, REPO_ROOT, Matrix, Variant, arch

LOCK_ROOT = REPO_ROOT / "images" / "locks"
GLIBC = "manylinux_2_36"  # Debian bookworm's glibc 2.36: every manylinux tag up to it is accepted


def wheel_platform(platform: str) -> str:
    """'linux/arm64' -> 'aarch64-manylinux_2_36': what uv resolves the platform's lock for."""
    return f"{PLATFORMS[platform]['machine']}-{GLIBC}"


# (file name, what goes in it); the first group whose pattern matches wins.
LAYERS: tuple[tuple[str, str], ...] = (
    ("1-cuda-libs-a.txt", r"nvidia-(cudnn|cublas)(-.*)?"),  # CUDA 13's cuBLAS wheel has no -cu13 suffix
    ("2-cuda-libs-b.txt", r"nvidia-.*"),
    ("3-torch.txt", r"(torch|triton)"),
    ("4-packages.txt", r".*"),
)
# The inputs' digest is a file of its own, not a line in each layer's: a new pin leaves the CUDA layers' files
# (and their cache) as they are.
DIGEST_FILE = "inputs.sha256"


def lock_dir(variant: Variant, root: Path = LOCK_ROOT, platform: str = AMD64, base: bool = False) -> Path:
    """The folder of one line's lock for `platform` (`base`: of its base line): images/locks/2.11-cu130/arm64/."""
    return root / (variant.base_name if base else variant.name) / arch(platform)


def layers(variant: Variant) -> tuple[tuple[str, str], ...]:
    """The variant's layer files: the base's four, or a flavor's one (it goes on top of its base's)."""
    return ((f"5-{variant.flavor}.txt", r".*"),) if variant.flavored else LAYERS


def lock_files(variant: Variant, root: Path = LOCK_ROOT, platform: str = AMD64, base: bool = False) -> list[Path]:
    """The line's layer files for `platform`; `base`: those of its base line (the line itself, or a flavor's base line)."""
    return [lock_dir(variant, root, platform, base) / file for file, _ in (LAYERS if base else layers(variant))]


def _read_pins(files: list[Path]) -> dict[str, str]:
    pins = {}
    for path in files:
        for line in path.read_text().splitlines():
            if match := re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^ ;\\]+)", line):
                pins[normalize_name(match.group(1))] = match.group(2)
    return pins


def base_pins(variant: Variant, root: Path = LOCK_ROOT, platform: str = AMD64) -> dict[str, str]:
    """{name: version} of everything the flavor's base line installs on `platform`, read from its lock."""
    return _read_pins(lock_files(variant, root, platform, base=True))


def locked_packages(variant: Variant, root: Path = LOCK_ROOT, platform: str = AMD64) -> list[tuple[str, str]] | None:
    """(name, version) of every package the line's committed lock for `platform` installs (a flavor's:
    its base's and its own); None when the line has no committed lock."""
    files = lock_files(variant, root, platform, base=True)
    if variant.flavored:
        files += lock_files(variant, root, platform)
    if not all(path.exists() for path in files):
        return None
    return sorted(_read_pins(files).items())


def requirements_in(variant: Variant, platform: str = AMD64) -> str:
    """What uv resolves: the line's pins, gymnasium with the extras the line installs on `platform`."""
    pins = variant.flavor_packages if variant.flavored else variant.pins()
    return "".join(variant.requirement(name, version, platform) + "\n" for name, version in pins)


def overrides_txt(variant: Variant) -> str:
    """uv's --overrides file: [overrides] of the matrix, each requirement on its own line."""
    return "".join(f"{o.requirement}\n" for o in variant.overrides)


def inputs_digest(matrix: Matrix, variant: Variant, root: Path = LOCK_ROOT, platform: str = AMD64) -> str:
    parts = [
        requirements_in(variant, platform),
        overrides_txt(variant),
        variant.index,
        variant.python,
        wheel_platform(platform),
        matrix.resolved_before,
        repr(layers(variant)),
    ]
    if variant.flavored:  # a flavor resolves against its base's lock: a new base lock makes it stale
        parts.append(repr(sorted(base_pins(variant, root, platform).items())))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _uv() -> str:
    exe = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    if not Path(exe).exists():
        raise UsageError("uv not found; `pip install -r requirements-dev.txt` brings it")
    return exe


def compile_lock(matrix: Matrix, variant: Variant, platform: str = AMD64) -> str:
    """The variant's full lock for `platform`, resolved with uv (requirements format with hashes); a flavor's
    resolves with its base's lock as constraints and keeps only what the base does not install."""
    base = base_pins(variant, platform=platform) if variant.flavored else {}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "requirements.in"
        src.write_text(requirements_in(variant, platform))
        (Path(tmp) / "overrides.txt").write_text(overrides_txt(variant))
        constraints = ["--overrides", "overrides.txt"] if variant.overrides else []
        if variant.flavored:
            (Path(tmp) / "base.txt").write_text("".join(f"{name}=={version}\n" for name, version in sorted(base.items())))
            constraints += ["-c", "base.txt"]
        argv = [_uv(), "pip", "compile", "--quiet", "--no-config", "--native-tls", "--no-header", "--generate-hashes"]
        # uv takes each package from the first index that has it unless told to look at all of them.
        argv += [*variant.index_args(), *([] if variant.uses_pypi else ["--index-strategy", "unsafe-best-match"])]
        argv += ["--python-version", variant.python, "--python-platform", wheel_platform(platform)]
        argv += ["--exclude-newer", matrix.resolved_before, *constraints, src.name]
        result = hostprocs.run_host(argv, "uv pip compile", cwd=tmp, env={**os.environ, "UV_NO_PROGRESS": "1"})
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or ["no output"])[-1].strip()[:200]
        raise BuildFailed(
            f"cannot resolve the {arch(platform)} lock for {variant.name} from {variant.index} ({reason}); "
            "run `build.py lock` on a host that reaches it"
        )
    if not variant.flavored:
        return result.stdout
    return "".join(block for name, block in _blocks(result.stdout) if name not in base)


def _blocks(text: str) -> list[tuple[str, str]]:
    """(package name, its requirement block: the pin line, hashes, 'via' comments) in order."""
    blocks: list[tuple[str, str]] = []
    for line in text.splitlines(keepends=True):
        if re.match(r"^[A-Za-z0-9]", line):
            blocks.append((normalize_name(re.split(r"[=<>!~\[ ;]", line, maxsplit=1)[0]), line))
        elif blocks and line.strip():
            blocks[-1] = (blocks[-1][0], blocks[-1][1] + line)
    return blocks


def split_lock(text: str, files: tuple[tuple[str, str], ...] = LAYERS) -> dict[str, str]:
    """Split a uv lock into the layer files: {file name: requirement blocks}."""
    out = {file: "" for file, _ in files}
    for name, block in _blocks(text):
        file = next(f for f, pattern in files if re.fullmatch(pattern, name))
        out[file] += block
    return out


def write_lock(matrix: Matrix, variant: Variant, lock_text: str, root: Path = LOCK_ROOT, platform: str = AMD64) -> list[Path]:
    """Write the line's layer files for `platform`, each under its header, and the inputs' digest; return the paths."""
    folder = lock_dir(variant, root, platform)
    folder.mkdir(parents=True, exist_ok=True)
    flavor = f" --flavor {variant.flavor}" if variant.flavored else ""
    base = f" on top of {variant.base_name}'s lock" if flavor else ""
    header = (
        f"# GENERATED by `python build.py lock --cuda {variant.cuda} --torch {variant.torch_minor}{flavor}`{base} (uv pip compile --generate-hashes,\n"
        f"# Python {variant.python}, {wheel_platform(platform)}, index {variant.index}, resolved before {matrix.resolved_before}).\n"
    )
    for file, body in split_lock(lock_text, layers(variant)).items():
        (folder / file).write_text(f"{header}# DO NOT EDIT. One layer of the image: {file}.\n{body}")
    (folder / DIGEST_FILE).write_text(inputs_digest(matrix, variant, root, platform) + "\n")
    return [*lock_files(variant, root, platform), folder / DIGEST_FILE]


def lock_status(matrix: Matrix, variant: Variant, root: Path = LOCK_ROOT, platform: str = AMD64) -> str:
    """The line's committed lock for `platform` against the matrix: "fresh", "stale" or "missing"."""
    files = lock_files(variant, root, platform)
    if not any(p.exists() for p in files):
        return "missing"
    digest = lock_dir(variant, root, platform) / DIGEST_FILE
    if not all(p.exists() for p in files) or not digest.exists():
        return "stale"
    return "fresh" if digest.read_text().strip() == inputs_digest(matrix, variant, root, platform) else "stale"


def is_locked(variant: Variant, root: Path = LOCK_ROOT) -> bool:
    """Every platform of the line has its lock files (a multi-arch line is locked for all, or is not locked)."""
    return all(path.exists() for p in variant.platforms for path in lock_files(variant, root, p))


def check_locks(matrix: Matrix) -> int:
    """`build.py lock --check`, offline: print every line's lock state on each platform; UsageError naming the stale ones."""
    statuses = [
        (f"{v.name} ({arch(p)})", lock_status(matrix, v, platform=p)) for v in matrix.every_variant() for p in v.platforms
    ]
    for line, state in statuses:
        print(f"{line}: {state}")
    stale = [line for line, state in statuses if state == "stale"]
    if stale:
        raise UsageError(
            f"lock out of date with images/variants.toml for {', '.join(stale)}; run `python build.py lock --cuda ...` and commit"
        )
    return 0


SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")


PYPI = "https://pypi.org/pypi"
PYPI_ANSWER = 8 * 2**20  # bytes of one project's JSON from PyPI (torch's, the largest asked, is about 0.9 MB)


def pypi_requires(package: str, index: str = PYPI) -> tuple[str, list[str]] | None:
    """(newest version, its Requires-Dist) from PyPI's JSON API; None when PyPI cannot be asked or its answer
    cannot be read: more than PYPI_ANSWER bytes, not done within DEADLINES["pypi answer"], JSON past the
    registry client's bounds, or of another shape. The answer crosses a TLS-intercepting proxy."""
    import requests

    from pipeline import registry

    what = f"PyPI's answer for {package}"
    deadline = registry.Deadline(DEADLINES["pypi answer"], PYPI_ANSWER)  # from the request on: connecting, the headers, the body
    try:
        ca = str(SYSTEM_CA) if SYSTEM_CA.is_file() else True
        timeout = min(registry.REQUEST_TIMEOUT, deadline.left(what))
        with requests.get(f"{index}/{package}/json", stream=True, timeout=timeout, verify=ca) as resp:
            resp.raise_for_status()
            body = registry.bounded(resp, PYPI_ANSWER, what, deadline)
        info = registry.as_dict(body, what)["info"]
        version, requires = info["version"], info.get("requires_dist") or []
    except (requests.RequestException, RegistryDataRefused, RegistryUnreachable, KeyError, TypeError, AttributeError):
        return None
    if not isinstance(version, str) or not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        return None
    return version, requires


def override_news(override, newest: tuple[str, list[str]] | None) -> str:
    """One line: whether the newest release of the package an [overrides] entry works around still needs it."""
    if newest is None:
        return f"==> [overrides] {override.requirement!r}: could not ask PyPI whether {override.package} still declares {override.conflict}"
    version, requires = newest
    if any(override.conflict in r.replace(" ", "") for r in requires):
        return (
            f"==> [overrides] {override.requirement!r} still needed: {override.package} {version}, the newest release, "
            f"declares {override.conflict} ({override.link})"
        )
    return (
        f"==> [overrides] {override.requirement!r} can go: {override.package} {version} no longer declares {override.conflict}; "
        "drop the entry, raise the pin past it and run `build.py lock` again"
    )
