"""python -m smoke.startup [--min-driver X.Y.Z]: a few lines about this container at start.

Informational only: never exits non-zero, and fast (it does not import torch;
the driver and GPUs come from NVML, torch's CUDA line from torch/version.py).
The minimum driver comes from --min-driver, else from the image's spec
(/opt/proven-torch/expect.json), which also says what advisories the line carries.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import TextIO

from common import rules as common_rules
from smoke import facts, rules


def torch_build() -> tuple[str | None, str | None]:
    """(torch.__version__, torch.version.cuda) read from torch/version.py, without importing torch."""
    version, cuda = facts.installed_version("torch"), None
    spec = importlib.util.find_spec("torch")
    for location in (spec.submodule_search_locations or []) if spec else []:
        try:
            text = Path(location, "version.py").read_text()
        except OSError:
            continue
        found = dict(re.findall(r"^(__version__|cuda)\s*(?::[^=]*)?=\s*['\"]([^'\"]*)['\"]", text, re.M))
        version, cuda = found.get("__version__", version), found.get("cuda") or None
        break
    return version, cuda


def report(
    min_driver: str | None,
    nvml: dict | None,
    proc_driver: str | None,
    shm: int | None,
    torch_info: tuple,
    advisories: dict | None = None,
    driver_lines: dict[str, str] | None = None,
    rdma: dict | None = None,
) -> list[str]:
    """The start-up lines, from given facts (pure, so tests feed any machine)."""
    version, cuda = torch_info
    variant = os.environ.get("PROVEN_TORCH_VARIANT")
    lines = [
        f"proven-torch{' ' + variant if variant else ''}: torch {version or 'not installed'}, "
        f"CUDA {cuda or 'none (CPU build)'}, Python {sys.version.split()[0]}"
    ]
    gpus = (nvml or {}).get("gpus") or []
    driver = (nvml or {}).get("driver") or proc_driver
    if gpus:
        shown = ", ".join(f"{g['name']} ({g['memory_gb']} GB)" for g in gpus)
        lines.append(f"GPUs: {len(gpus)}: {shown}")
    elif driver:
        lines.append(f"GPUs: driver {driver} is visible but NVML lists no GPU; check NVIDIA_VISIBLE_DEVICES / --gpus")
    else:
        lines.append("GPUs: none visible; start the container with --gpus all (NVIDIA Container Toolkit) to use them")
    if driver:
        verdict = rules.driver_status(driver, min_driver, cuda, driver_lines)
        prefix = "Driver: " if verdict.status == "pass" else "Driver: WARNING: "
        lines.append(prefix + verdict.message)
    warning = rules.shm_advice(shm)
    lines.append(f"/dev/shm: {rules.human_bytes(shm)}" + (f"; WARNING: {warning}" if warning else ""))
    if rdma is not None:
        lines.append(rules.nccl_transports(rdma))
    if advisories is not None:
        import datetime as dt

        lines.append(common_rules.advisory_summary(advisories, dt.date.today()))
    return lines


def baked_spec() -> dict:
    """The image's spec ({} outside an image): its pins, driver floors and carried advisories."""
    import json

    from smoke.expect import spec_path

    try:
        return json.loads(spec_path().read_text())
    except (OSError, ValueError):
        return {}


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        parser = argparse.ArgumentParser(prog="python -m smoke.startup", description=__doc__.splitlines()[0])
        parser.add_argument("--min-driver", help="the oldest driver the image runs on (default: the image's spec)")
        args, _unknown = parser.parse_known_args(argv)
        spec = baked_spec()
        expect = spec.get("expect") or {}
        nvml = facts.nvml_info()
        proc_driver = None
        if not nvml:
            try:
                proc_driver = facts.parse_proc_driver_version(facts.PROC_DRIVER_VERSION.read_text())
            except OSError:
                pass
        lines = report(
            min_driver=args.min_driver or expect.get("min_driver"),
            nvml=nvml,
            proc_driver=proc_driver,
            shm=facts.shm_bytes(),
            torch_info=torch_build(),
            advisories=spec.get("advisories"),
            driver_lines=expect.get("driver_lines"),
            rdma=facts.rdma_facts(),
        )
    except SystemExit:  # --help
        return 0
    except Exception as err:  # informational: say what went wrong, never stop the container
        lines = [f"proven-torch: start-up report unavailable ({type(err).__name__}: {err})"]
    for line in lines:
        print(line, file=out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
