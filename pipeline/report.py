"""The validation report: one JSON file per build, next to what the checks wrote."""

from __future__ import annotations

import platform
from dataclasses import asdict
from pathlib import Path

from pipeline.html_report import write_page
from pipeline.records import write
from pipeline.validation.gate import Validation
from pipeline.variants import Variant


def write_report(
    path: Path,
    *,
    variant: Variant,
    image_id: str,
    build_seconds: float,
    created: str,
    revision: str,
    validation: Validation | None,
    status: str,
    tags: list[str] | None = None,
    push=None,
    error: str | None = None,
    stamped_id: str | None = None,
) -> Path:
    """Write (or rewrite) the report; return its path."""
    report = {
        "schema": 2,
        "status": status,  # "validated", "failed", "pushed"
        "error": error,
        "variant": variant.name,
        "pins": {k: v for k, v in asdict(variant).items() if k != "packages"},
        "packages": dict(variant.packages),
        "validated_image_id": image_id,
        "stamped_image_id": stamped_id,  # the validated layers with what validation found stamped on: tagged, pushed
        "created": created,
        "revision": revision,
        "build_seconds": round(build_seconds, 1),
        "gpu": validation.gpu if validation else None,
        "validation": validation.as_dict() if validation else None,
        "tags": tags or [],
        "pushed": push.refs if push else {},
        "push": push.as_dict() if push else None,
        "host": {"machine": platform.machine(), "system": platform.platform()},
    }
    write(path, report)
    write_page(path)
    return path
