"""Tags, computed from what is inside the validated image and checked against the pins."""

from __future__ import annotations

import re

from pipeline.errors import ValidationFailed
from pipeline.variants import Variant, cuda_tag, variant_name

_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def image_facts(smoke_report: dict) -> tuple[str, str, str]:
    """(torch release, CUDA version, Python major.minor) as the image reported them."""
    facts = smoke_report.get("facts", {})
    torch = str(facts.get("torch_release") or "")
    cuda = str(facts.get("cuda") or "")
    python = ".".join(str(facts.get("python") or "").split(".")[:2])
    return torch, cuda, python


def check_facts_match_pins(variant: Variant, smoke_report: dict) -> None:
    torch, cuda, python = image_facts(smoke_report)
    mismatches = [
        f"{what} {got or 'unknown'} (pinned {pinned})"
        for what, got, pinned in (
            ("torch", torch, variant.torch),
            ("CUDA", cuda, variant.cuda),
            ("Python", python, variant.python),
        )
        if got != pinned
    ]
    if mismatches:
        raise ValidationFailed(
            "the image reports " + ", ".join(mismatches) + "; it will not be tagged (check images/variants.toml and the index)"
        )


def compute_tags(variant: Variant, smoke_report: dict, date: str, revision: str) -> tuple[str, list[str]]:
    """(immutable tag, moving tags). The immutable one names torch, CUDA, Python, date and revision
    (and the flavor, last); only the default base variant moves `latest`."""
    check_facts_match_pins(variant, smoke_report)
    torch, cuda, python = image_facts(smoke_report)
    flavor = f"-{variant.flavor}" if variant.flavored else ""  # a flavor's tags end in its name
    immutable = f"{torch}-{cuda_tag(cuda)}-py{python}-{date}-{revision}{flavor}"
    moving = [variant_name(torch, cuda) + flavor] + (["latest"] if variant.is_default else [])  # the line's name
    for tag in [immutable, *moving]:
        if not _TAG.match(tag):
            raise ValidationFailed(f"computed tag {tag!r} is not a valid Docker tag")
    return immutable, moving


def image_ref(repo: str, registry: str | None) -> str:
    return f"{registry.rstrip('/')}/{repo}" if registry else repo
