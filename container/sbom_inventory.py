#!/usr/bin/env python3
"""Print the image's packages as JSON: {"python": [...], "debian": [...]}.

build.py runs it inside every image it validates and writes the CycloneDX SBOM
from it on the host (pipeline/validation/sbom.py). Python packages come from `pip inspect`
of the interpreter that runs this file (the image's venv), Debian packages from
dpkg-query.
"""

from __future__ import annotations

import json
import subprocess
import sys

DPKG_FORMAT = "${Package}\t${Version}\t${Architecture}\n"


def python_packages(pip_inspect: dict) -> list[dict]:
    out = []
    for package in pip_inspect["installed"]:
        meta = package["metadata"]
        licence = meta.get("license_expression") or (meta.get("license") or "")[:80]
        out.append({"name": meta["name"], "version": meta["version"], "license": licence})
    return out


def debian_packages(dpkg_output: str) -> list[dict]:
    return [dict(zip(("name", "version", "arch"), line.split("\t"), strict=True)) for line in dpkg_output.splitlines() if line]


def main() -> int:
    pip = subprocess.run([sys.executable, "-m", "pip", "inspect", "--local"], capture_output=True, text=True, check=True)
    dpkg = subprocess.run(["dpkg-query", "-W", "-f", DPKG_FORMAT], capture_output=True, text=True, check=True)
    print(json.dumps({"python": python_packages(json.loads(pip.stdout)), "debian": debian_packages(dpkg.stdout)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
