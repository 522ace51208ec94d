"""Image size: total, largest layers, and the variant's budget."""

from __future__ import annotations

import re

from pipeline.errors import ValidationFailed
from pipeline.variants import Variant

GB = 1000**3

# What each lock layer holds (pipeline/lock.py's LAYERS), in words.
LOCK_LAYERS = {
    "1-cuda-libs-a.txt": "cuDNN and cuBLAS wheels",
    "2-cuda-libs-b.txt": "the other CUDA library wheels",
    "3-torch.txt": "torch and triton",
    "4-packages.txt": "torchvision, torchaudio, JupyterLab, gymnasium and the rest",
}


def layer_name(created_by: str) -> str:
    """What a layer installs, from its build step: 'Python: torch and triton (3-torch.txt)', 'OS packages: ...'."""
    step = " ".join(created_by.split())
    lock = re.search(r"-r /opt/proven-torch/lock/(\S+)", step)
    if "pip install" in step and lock:
        return f"Python: {LOCK_LAYERS.get(lock.group(1), lock.group(1))} ({lock.group(1)})"
    if "pip install" in step:
        pins = re.findall(r'"?([A-Za-z0-9_.-]+==[^\s"]+)"?', step)
        return "Python: " + (", ".join(pins[:4]) + (" ..." if len(pins) > 4 else "") if pins else "pip install")
    packages = re.search(r"apt-get install\s+(?:-\S+\s+)*(.*?)(?:&&|$)", step)
    if packages:
        names = packages.group(1).split()
        return "OS packages: " + ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    if "python3 -m venv" in step:
        return "the Python venv (/opt/venv)"
    copy = re.match(r"COPY (\S+)", step)
    if copy:
        return f"project files: {copy.group(1)}"
    return "base image" if not step else step[:80]


def size_summary(client, image_id: str, top: int = 5) -> dict:
    image = client.images.get(image_id)
    layers = [
        {
            "bytes": int(h["Size"]),
            "name": layer_name(h.get("CreatedBy", "")),
            "created_by": " ".join(h.get("CreatedBy", "").split())[:160],
        }
        for h in client.api.history(image_id)
        if int(h.get("Size") or 0) > 0
    ]
    layers.sort(key=lambda layer: int(str(layer["bytes"])), reverse=True)
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
            + (summary["largest_layers"][0]["name"] if summary["largest_layers"] else "?")
        )
