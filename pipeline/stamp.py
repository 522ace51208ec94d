"""Validate an untagged image, compute its tags from what is inside it (checked against the pins), then stamp
what only validation knows on a config-only child (same layers, checked by pipeline.labels) and tag that
child: nothing is tagged that did not pass."""

from __future__ import annotations

import hashlib
import json
import re

from common.cli import atomic_write
from common.rules import FAILING_SEVERITIES
from pipeline import labels, push
from pipeline.errors import ValidationFailed
from pipeline.records import VALIDATION
from pipeline.target import Tagged, Target, Validation
from pipeline.validation import gate
from pipeline.variants import Variant, cuda_tag

_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def compute_tags(variant: Variant, smoke_report: dict, date: str, revision: str) -> tuple[str, list[str]]:
    """(immutable tag, moving tags), from what the image reports, which must be the pins. The immutable one names
    torch, CUDA, Python, date and revision (and the flavor, last); only the default base variant moves `latest`."""
    facts = smoke_report.get("facts", {})
    torch = str(facts.get("torch_release") or "")
    cuda = str(facts.get("cuda") or "")
    python = ".".join(str(facts.get("python") or "").split(".")[:2])  # major.minor
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
    flavor = f"-{variant.flavor}" if variant.flavored else ""  # a flavor's tags end in its name
    immutable = f"{torch}-{cuda_tag(cuda)}-py{python}-{date}-{revision}{flavor}"
    moving = variant.moving_tags  # the pins held: the line's name is what the image reports
    for tag in [immutable, *moving]:
        if not _TAG.match(tag):
            raise ValidationFailed(f"computed tag {tag!r} is not a valid Docker tag")
    return immutable, moving


def stamp_values(validation: Validation, immutable: str, record: bytes) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, environment) that only validation knows, for the config-only child image. The label and
    variable keep the name "release": `proof` on a user's host compares its PPO gate figures with them."""
    release = json.dumps(validation.gate_figures(), sort_keys=True, separators=(",", ":"))
    accepted = ", ".join(
        f"{f['id']} {f['severity']}" for f in validation.audit.get("allowed", []) if f["severity"] in FAILING_SEVERITIES
    )
    image_labels = {
        labels.ADVISORIES: (accepted or "none known") + f" (advisory data as of {validation.audit.get('as_of')})",
        labels.VERSION: immutable,
        labels.VALIDATION: "passed",
        labels.VALIDATION_SHA256: hashlib.sha256(record).hexdigest(),
        labels.GPU_VALIDATED: "true" if validation.gpu else "false",
        labels.VALIDATED_ON: validation.validated_on,
        labels.RELEASE_PPO: release,
    }
    return image_labels, {labels.STAMPED_ENV: release}


def validate_and_tag(client, image_id: str, gpus: int, target: Target) -> Tagged:
    """Validate the untagged image; stamp and tag it only when every check passed."""
    validation = gate.validate_image(gate.Request(client, image_id, gpus, target))
    try:
        if not validation.ok:
            raise ValidationFailed("; ".join(validation.failures) + f"; nothing was tagged (report: {target.report_path})")
        immutable, moving = compute_tags(target.variant, validation.smoke, target.date, target.revision)
    except ValidationFailed as err:
        target.write_report(image_id, validation, status="failed", error=str(err))
        raise
    record = validation.record()
    atomic_write(target.run_dir / VALIDATION, lambda f: f.write(record))  # these bytes' hash is a label
    line_tags = [immutable, *moving]
    all_tags = [target.own_tag(tag) for tag in line_tags]
    image_labels, env = stamp_values(validation, immutable, record)
    stamped_id = labels.stamp(client, image_id, image_labels, env)
    target.write_report(image_id, validation, status="validated", tags=all_tags, stamped_id=stamped_id)
    refs = push.tag_image(client, stamped_id, target.ref, all_tags)
    print(f"==> validated and tagged: {', '.join(refs)}", flush=True)
    return Tagged(validated_id=image_id, stamped_id=stamped_id, tags=all_tags, validation=validation, line_tags=line_tags)
