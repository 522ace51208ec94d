"""Image labels (docs/supply-chain.md, "Labels"): checked against the pins and the image's own facts, then
what only validation knows stamped on a config-only child (FROM the validated image, LABEL and ENV, no RUN),
whose layers `stamp` checks are the validated image's."""

from __future__ import annotations

import io

from pipeline.errors import ValidationFailed
from pipeline.variants import Variant

PREFIX = "io.proven-torch."
VALIDATION_SHA256 = f"{PREFIX}validation-sha256"  # the hash of validation.json, stamped at validation; signing checks it
# What stamping adds (pipeline/stamp.py): the labels only validation knows, and the variable `proof` reads.
ADVISORIES, VERSION, VALIDATION = f"{PREFIX}advisories", "org.opencontainers.image.version", f"{PREFIX}validation"
GPU_VALIDATED, VALIDATED_ON, RELEASE_PPO = f"{PREFIX}gpu-validated", f"{PREFIX}validated-on", f"{PREFIX}release-ppo"
STAMPED = (ADVISORIES, VERSION, VALIDATION, VALIDATION_SHA256, GPU_VALIDATED, VALIDATED_ON, RELEASE_PPO)
STAMPED_ENV = "PROVEN_TORCH_RELEASE"


def check_labels(labels: dict[str, str], variant: Variant) -> None:
    """Fail when a label disagrees with the pins (the smoke checks then hold the image to the pins) or a build
    label is missing."""
    expected = {
        f"{PREFIX}variant": variant.name,
        f"{PREFIX}torch": variant.torch,
        f"{PREFIX}cuda": variant.cuda,
        f"{PREFIX}cudnn": str(variant.cudnn),
        f"{PREFIX}python": variant.python,
    }
    wrong = [f"{key}={labels.get(key)!r} (expected {value!r})" for key, value in expected.items() if labels.get(key) != value]
    for key in ("org.opencontainers.image.title", "org.opencontainers.image.revision", "org.opencontainers.image.created"):
        if not labels.get(key) or labels.get(key) == "unknown":
            wrong.append(f"{key} missing")
    if wrong:
        raise ValidationFailed("image labels do not match: " + ", ".join(wrong) + "; it will not be tagged")


def _quoted(value: str) -> str:
    """A Dockerfile LABEL/ENV value in double quotes (backslash and quote escaped)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def stamp(client, image_id: str, labels: dict[str, str], env: dict[str, str] | None = None) -> str:
    """A config-only child of the image carrying `labels` (and `env`); return its ID."""
    lines = " \\\n      ".join(f"{key}={_quoted(value)}" for key, value in sorted(labels.items()))
    dockerfile = f"FROM {image_id}\nLABEL {lines}\n"
    if env:
        dockerfile += "ENV " + " ".join(f"{key}={_quoted(value)}" for key, value in sorted(env.items())) + "\n"
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), rm=True, forcerm=True, pull=False)
    parent = client.images.get(image_id).attrs
    if parent["RootFS"]["Layers"] != image.attrs["RootFS"]["Layers"]:
        raise ValidationFailed("stamping labels changed the image's layers; refusing to tag")
    if parent.get("Architecture") != image.attrs.get("Architecture"):
        raise ValidationFailed(
            f"stamping labels turned the {parent.get('Architecture')} image into {image.attrs.get('Architecture')}; refusing to tag"
        )
    return image.id
