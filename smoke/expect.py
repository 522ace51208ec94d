"""The expectations the smoke suite checks against, and the image's baked spec.

Every image carries its spec, generated from the variant matrix at build time
(/opt/proven-torch/expect.json): the pins the smoke suite expects and the
settings of the PPO gate. `--expect` overrides the pins; `--as-installed` takes
them from the installed stack instead (a bare host that has its own torch).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from common.cli import UsageError
from common.rules import BAKED_SPEC
from smoke import rules

# key -> (allowed types, may be null, must be present)
_SCHEMA: dict[str, tuple[tuple[type, ...], bool, bool]] = {
    "variant": ((str,), True, False),
    "torch": ((str,), False, True),
    "torchvision": ((str,), True, True),
    "torchaudio": ((str,), True, True),
    "cuda": ((str,), True, True),
    "cudnn": ((int,), True, True),
    "nccl": ((str,), True, True),
    "python": ((str,), False, True),
    "min_driver": ((str,), True, True),
    # optional: CUDA line -> minimum driver, so a too-old driver gets a line it can run
    "driver_lines": ((dict,), True, False),
}
KEYS = tuple(_SCHEMA)


def spec_path() -> Path:
    """Where the image's spec is: $PROVEN_TORCH_SPEC, else the baked file."""
    return Path(os.environ.get("PROVEN_TORCH_SPEC") or BAKED_SPEC)


def load_spec(path: Path | None = None) -> dict:
    """The spec file ({"expect": {...}, "ppo_gate": {...}}), its expectations validated."""
    path = path or spec_path()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(
            f"no expectations: {path} does not exist (not a proven-torch image?); "
            "pass --expect JSON|@FILE, or --as-installed to check the installed stack against itself"
        ) from None
    except (OSError, ValueError) as err:
        raise UsageError(f"cannot read the image spec {path}: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("expect"), dict) or not isinstance(data.get("ppo_gate"), dict):
        raise UsageError(f"{path}: not an image spec (needs the objects 'expect' and 'ppo_gate')")
    return {**data, "expect": validate_expect(data["expect"])}


def load_expect(arg: str) -> dict:
    """Parse --expect: a JSON object, or '@PATH' naming a file holding one.

    A null pin means "must be absent" (e.g. "cuda": null expects a CPU-only torch).
    Raises UsageError naming the problem.
    """
    if arg.startswith("@"):
        path = Path(arg[1:])
        try:
            text = path.read_text()
        except OSError as err:
            raise UsageError(f"--expect {arg}: cannot read {path}: {err.strerror or err}") from None
    else:
        text = arg
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise UsageError(f"--expect is not valid JSON ({err.msg} at line {err.lineno} column {err.colno})") from None
    return validate_expect(data)


def validate_expect(data: object) -> dict:
    if not isinstance(data, dict):
        raise UsageError(f"--expect must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - set(_SCHEMA))
    if unknown:
        raise UsageError(f"--expect has unknown key(s) {', '.join(unknown)}; known keys: {', '.join(KEYS)}")
    missing = [k for k, (_, _, required) in _SCHEMA.items() if required and k not in data]
    if missing:
        raise UsageError(f"--expect is missing {', '.join(missing)} (use null for a value that must be absent)")
    out = {}
    for key, (types, nullable, _) in _SCHEMA.items():
        value = data.get(key)
        if value is None:
            if key in data and not nullable:
                raise UsageError(f"--expect {key} must not be null")
            out[key] = None
            continue
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            wanted = " or ".join(t.__name__ for t in types)
            raise UsageError(f"--expect {key} must be {wanted}{' or null' if nullable else ''}, got {value!r}")
        out[key] = value
    lines = out["driver_lines"]
    if lines is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in lines.items()):
        raise UsageError('--expect driver_lines must map CUDA lines to driver versions, e.g. {"12.8": "<minimum driver>"}')
    return out


def expect_from_facts(facts: dict, min_driver: str | None = None, variant: str | None = None) -> dict:
    """Expectations that the machine described by `facts` (smoke.facts.collect) meets.

    For tests and for running the checks outside an image (e.g. on a GPU host with
    its own torch); images are always checked against the matrix's pins instead.
    """
    return validate_expect(
        {
            "variant": variant,
            "torch": facts["torch_release"],
            "torchvision": facts["torchvision"].split("+", 1)[0] if facts["torchvision"] else None,
            "torchaudio": facts["torchaudio"].split("+", 1)[0] if facts["torchaudio"] else None,
            "cuda": facts["cuda"],
            "cudnn": facts["cudnn"],
            "nccl": facts["nccl"],
            "python": ".".join(facts["python"].split(".")[:2]),
            "min_driver": min_driver or rules.min_driver_for(facts["cuda"]),
        }
    )
