"""Reading `proof`'s printed rows back as label -> value, and what each value must be, from its source
(the facts the smoke suite collected): for the unit, process and image tests that check each row says
what it measured."""

from __future__ import annotations

import re

from smoke import rules


def version_row_source(facts: dict) -> dict[str, str]:
    """What each label of the versions row must show, straight from the facts ('absent' for what is not installed)."""
    return {
        "torch": rules.release(facts["torch"]),
        "torchvision": rules.release(facts["torchvision"]) or "absent",
        "torchaudio": rules.release(facts["torchaudio"]) or "absent",
        "cuda": str(facts["cuda"]) if facts["cuda"] is not None else "absent",
        "cudnn": f"{rules.cudnn_str(facts['cudnn'])} ({facts['cudnn']})" if facts["cudnn"] is not None else "absent",
        "nccl": str(facts["nccl"]) if facts["nccl"] is not None else "absent",
        "python": ".".join(facts["python"].split(".")[:2]),  # the pin is major.minor
    }


def header_source(facts: dict) -> dict[str, str]:
    """What each label of the facts header ('  torch X  CUDA Y  cuDNN Z  NCCL W  Python V') must show."""
    return {
        "torch": str(facts["torch"]),
        "CUDA": str(facts["cuda"]),
        "cuDNN": str(rules.cudnn_str(facts["cudnn"])),
        "NCCL": str(facts["nccl"]),
        "Python": str(facts["python"]),
    }


def versions_row_pairs(detail: str) -> dict[str, str]:
    """'torch 3.7.2, ..., python 3.11; no CUDA wheels required' -> {'torch': '3.7.2', ...}"""
    versions = detail.split("; ")[0]
    return dict(item.split(" ", 1) for item in versions.split(", "))


def header_pairs(line: str) -> dict[str, str]:
    """'  torch X  CUDA Y  cuDNN Z  NCCL W  Python V' -> {'torch': 'X', ...}"""
    return dict(item.split(" ", 1) for item in re.split(r"\s{2,}", line.strip()))


def printed_rows(stdout: str) -> tuple[str, dict[str, str]]:
    """The facts header line and {check name: its detail} from a smoke suite's or proof's output
    (rows may carry proof's stream prefix)."""
    lines = [line.removeprefix("  | ") for line in stdout.splitlines()]
    header = next(line for line in lines if line.lstrip().startswith("torch ") and "  CUDA " in line)
    rows = {}
    for line in lines:
        parts = line.split(None, 3)
        if len(parts) == 4 and parts[1] in ("PASS", "FAIL", "SKIP"):
            rows[parts[0]] = parts[3]
    return header, rows
