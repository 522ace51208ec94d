"""Rules the image's commands and the host's pipeline both apply, written once: what a package's
name is (PEP 503), when advisory data is stale, which severities fail, how a line's advisories are
said, which smoke checks need a GPU (the image runs them; the host's signed test result names them),
and where the image keeps its own spec.

Standard library only: the image's commands import it at start, and so do `build.py list`'s
bare-python3 paths.
"""

from __future__ import annotations

import re
from pathlib import Path

# The image's own spec, rendered from images/variants.toml and baked in at build time.
BAKED_SPEC = Path("/opt/proven-torch/expect.json")

# Every smoke check by name, in the order they run, and whether it needs a GPU (smoke/checks.py
# pairs each with its function; a GPU check that could not run makes a proof WARNED, never PASSED).
CHECK_NEEDS_GPU = {
    "versions": False,
    "driver": True,
    "gpu": True,
    "cudnn": True,
    "amp": True,
    "amp_cpu": False,
    "shm": False,
    "distributed": False,
    "compile": False,
}


def normalize_name(name: str) -> str:
    """PEP 503: 'Nvidia_CUDNN.cu12' -> 'nvidia-cudnn-cu12'."""
    return re.sub(r"[-_.]+", "-", name).lower()


# --------------------------------------------------------------------------- advisories

# Advisory data older than this is "stale": advisories published since are missing from what it says. The same
# age bounds a signed proof (build.py verify --max-age's default).
STALE_AFTER_DAYS = 90
# The largest slowdown of the PPO gate's steps/s on the same hardware that `build.py diff` does not call a
# regression: above the spread of repeated runs on one machine (docs/benchmarks.md, "Repeat runs").
MAX_SLOWDOWN = 0.15


def advisory_age(as_of: str | None, today) -> str:
    """How old the image's advisory data is, in the one wording of every line a user of the image reads (the
    start log, `proof`): 'PyPA data of 2026-07-23, 9 days old', and past STALE_AFTER_DAYS what that means to
    them and what they can do (today: a datetime.date)."""
    import datetime as dt

    if as_of:
        days = (today - dt.date.fromisoformat(as_of)).days
        age = f"PyPA data of {as_of}, {days} day{'s' if days != 1 else ''} old"
        if days <= STALE_AFTER_DAYS:
            return age
    else:
        age = "PyPA data of unknown date"
    return f"{age}: stale, so advisories published since are not listed; a newer image carries newer data"


# Severities that fail the build's audit unless accepted; UNKNOWN: no record says it is below HIGH.
FAILING_SEVERITIES = frozenset({"HIGH", "CRITICAL", "UNKNOWN"})


def carried_text(section: dict) -> str:
    """'2 high (high and critical accepted): torch PYSEC-..., PYSEC-...; setuptools PYSEC-...' or
    'none known': what a line carries, in words, grouped by package (the line's own pins first)."""
    by_package: dict[str, list[str]] = {}
    for row in section.get("carried", []):
        by_package.setdefault(row["package"], []).append(row["id"])
    listing = "; ".join(f"{package} {', '.join(ids)}" for package, ids in by_package.items())
    return section.get("summary", "?") + (f": {listing}" if listing else "")


def advisory_summary(section: dict | None, today) -> str:
    """One line, the same at a container's start and in `proof`: what the image's line carries, by the
    advisory data it was built against, that data's age, and what to be careful with."""
    if not section:
        return "Advisories: not recorded in this image"
    line = f"Advisories: {carried_text(section)} ({advisory_age(section.get('as_of'), today)})"
    if any(row["severity"] == "CRITICAL" for row in section.get("carried", [])):
        line += "; CRITICAL: never load a checkpoint you did not make with this image"
    elif any(row["package"] == "torch" and row["severity"] in ("HIGH", "UNKNOWN") for row in section.get("carried", [])):
        line += "; load checkpoints and pt2 archives only from sources you trust"
    return line


def advisory_details(section: dict | None) -> list[str]:
    """One line per carried advisory: id, severity, package, fixed release, what it affects."""
    return [
        f"  {row['id']} ({row['severity']}, {_acceptance(row)}) "
        f"{row['package']} {row['version']}, fixed: {row.get('fixed') or '?'}{_what(row)}"
        for row in (section or {}).get("carried", [])
    ]


def _acceptance(row: dict) -> str:
    if row["severity"] not in FAILING_SEVERITIES:
        return "reported"  # below HIGH: listed, never a reason to fail
    return "accepted" if row.get("accepted") else "NOT accepted"


def _what(row: dict) -> str:
    text = row.get("affects") or row.get("summary") or ""
    return f": {text}" if text else ""


# The signing key's passphrase is the signer process's alone (pipeline/attest.py starts it with it): no host
# command (docker, skopeo, git, uv, diffoscope) is given it (pipeline/hostprocs.run_host takes it out).
PASSPHRASE_ENV = "PROVEN_TORCH_SIGN_KEY_PASSPHRASE"
