"""Validate an untagged image, then stamp what only validation knows on a config-only child (same
layers, checked by pipeline.labels) and tag that child: nothing is tagged that did not pass."""

from __future__ import annotations

import hashlib
import json

from common.cli import atomic_write
from pipeline import labels, push, tags
from pipeline.errors import ValidationFailed
from pipeline.records import VALIDATION
from pipeline.target import Tagged, Target, Validation
from pipeline.validation import audit, gate


def stamp_values(validation: Validation, immutable: str, record: bytes) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, environment) that only validation knows, for the config-only child image. The label and
    variable keep the name "release": `proof` on a user's host compares its PPO gate figures with them."""
    release = json.dumps(validation.gate_figures(), sort_keys=True, separators=(",", ":"))
    accepted = ", ".join(
        f"{f['id']} {f['severity']}" for f in validation.audit.get("allowed", []) if f["severity"] in audit.FAILING
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
        gate.require_valid(validation, target.report_path)
        immutable, moving = tags.compute_tags(target.variant, validation.smoke, target.date, target.revision)
    except ValidationFailed as err:
        target.write_report(image_id, validation, status="failed", error=str(err))
        raise
    record = (json.dumps(validation.as_dict(), indent=2, sort_keys=True) + "\n").encode()
    atomic_write(target.run_dir / VALIDATION, lambda f: f.write(record))  # these bytes' hash is a label
    line_tags = [immutable, *moving]
    all_tags = [target.own_tag(tag) for tag in line_tags]
    image_labels, env = stamp_values(validation, immutable, record)
    stamped_id = labels.stamp(client, image_id, image_labels, env)
    target.write_report(image_id, validation, status="validated", tags=all_tags, stamped_id=stamped_id)
    refs = push.tag_image(client, stamped_id, target.ref, all_tags)
    print(f"==> validated and tagged: {', '.join(refs)}", flush=True)
    return Tagged(validated_id=image_id, stamped_id=stamped_id, tags=all_tags, validation=validation, line_tags=line_tags)
