"""Image size: total, largest layers, and the variant's budget."""

from __future__ import annotations

from pipeline.errors import ValidationFailed
from pipeline.variants import Variant

GB = 1000**3


def size_summary(client, image_id: str, top: int = 5) -> dict:
    image = client.images.get(image_id)
    layers = [
        {"bytes": int(h["Size"]), "created_by": " ".join(h.get("CreatedBy", "").split())[:160]}
        for h in client.api.history(image_id)
        if int(h.get("Size") or 0) > 0
    ]
    layers.sort(key=lambda layer: layer["bytes"], reverse=True)
    return {
        "uncompressed_bytes": int(image.attrs["Size"]),
        "layers": len(image.attrs["RootFS"]["Layers"]),
        "largest_layers": layers[:top],
    }


def check_budget(summary: dict, variant: Variant) -> None:
    size = summary["uncompressed_bytes"]
    if size > variant.size_budget_gb * GB:
        raise ValidationFailed(
            f"image is {size / GB:.2f} GB, over the {variant.name} budget of {variant.size_budget_gb} GB "
            "(images/variants.toml size_budget_gb); largest layer: "
            + (summary["largest_layers"][0]["created_by"][:80] if summary["largest_layers"] else "?")
        )
