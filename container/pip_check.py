"""pip check for the image build, accepting only what the matrix accepts on purpose.

    python3 pip_check.py [--accept PACKAGE:REQUIREMENT ...] [--sbsa]

--accept: a package's requirement that the lock overrides ([overrides] in images/variants.toml,
written here by pipeline/render.py), e.g. moviepy:pillow<12.0,>=9.2.0; pip check's line for exactly
that requirement of that package is accepted, nothing else about it.
--sbsa: on aarch64, NVIDIA wheels whose installed WHEEL file names the platform manylinux2014_sbsa
(NVIDIA's name for Arm servers, where the file name says aarch64) are "not supported on this
platform" to pip check; those lines are accepted for nvidia-* wheels whose WHEEL says sbsa.
Any other finding fails (exit 1). Standard library only: it runs in the build, before the project.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import re
import subprocess
import sys

CONFLICT = re.compile(r"^(?P<package>\S+) (?P<version>\S+) has requirement (?P<requirement>\S+), but you have (?P<have>.+)\.$")
SBSA = re.compile(r"^(?P<package>nvidia-[A-Za-z0-9-]+) \S+ is not supported on this platform$")
CLEAN = "No broken requirements found."


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def sbsa_wheel(package: str) -> bool:
    try:
        return "_sbsa" in (importlib.metadata.distribution(package).read_text("WHEEL") or "")
    except importlib.metadata.PackageNotFoundError:
        return False


def judge(lines: list[str], accept: list[str], sbsa: bool, machine: str, is_sbsa=sbsa_wheel) -> tuple[list[str], list[str]]:
    """(accepted, refused) lines of pip check's output."""
    accepted_pairs = {(_name(a.split(":", 1)[0]), a.split(":", 1)[1]) for a in accept}
    accepted, refused = [], []
    for line in (raw.strip() for raw in lines):
        if not line or line == CLEAN:
            continue
        conflict = CONFLICT.match(line)
        if conflict and (_name(conflict["package"]), conflict["requirement"]) in accepted_pairs:
            accepted.append(f"{line} (images/variants.toml [overrides])")
            continue
        unsupported = SBSA.match(line)
        if sbsa and machine == "aarch64" and unsupported and is_sbsa(unsupported["package"]):
            accepted.append(f"{line} (NVIDIA's sbsa wheel tag on aarch64)")
            continue
        refused.append(line)
    return accepted, refused


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--accept", action="append", default=[], metavar="PACKAGE:REQUIREMENT")
    parser.add_argument("--sbsa", action="store_true")
    args = parser.parse_args(argv)
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, check=False)
    accepted, refused = judge(done.stdout.splitlines(), args.accept, args.sbsa, platform.machine())
    for line in accepted:
        print(f"pip check: accepted: {line}")
    for line in refused:
        print(f"pip check: {line}")
    if refused or (done.returncode != 0 and not accepted):
        print(f"pip check: {len(refused) or 'unexplained'} finding(s) not accepted", file=sys.stderr)
        return 1
    print(f"pip check: consistent ({len(accepted)} accepted finding(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
