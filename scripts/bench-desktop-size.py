#!/usr/bin/env python3
"""What the desktop costs in the image (docs/benchmarks.md, "The desktop"): per package, the bytes
of its files on disk, uncompressed.

    .venv/bin/python scripts/bench-desktop-size.py IMAGE [--json]

The Debian packages are those of the image's desktop `apt-get install` (the one that installed
tigervnc-standalone-server, from apt's own log: what it added that no earlier layer had); the
Python ones are the lock's packages that only the desktop needs (DESKTOP_PYTHON). Each package's
files are summed inside a container of the image (regular files only, as dpkg and the wheel's
RECORD list them; what the image's dpkg path-excludes keep out is not on disk and not counted).
All of them together are also read out as one tar stream and gzip-compressed (level 6, as
`docker push` writes layers). The layer's own size comes from `docker history`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys

DESKTOP_PYTHON = ["jupyter-remote-desktop-proxy"]

INSIDE = r"""
import json, os, re, subprocess, sys
from importlib.metadata import distribution

every = []

def size(paths):
    files = [p for p in paths if os.path.isfile(p) and not os.path.islink(p)]
    every.extend(files)
    return sum(os.path.getsize(p) for p in files)

history = open("/var/log/apt/history.log").read().split("\n\n")
last = [h for h in history if "Install:" in h and "tigervnc-standalone-server" in h][-1]
command = re.search(r"Commandline: (.*)", last).group(1)
installed = re.findall(r"(\S+?):\S+ \(([^)]*)\)", last.split("Install:", 1)[1].splitlines()[0])
debian = {}
for name, version in installed:
    files = subprocess.run(["dpkg", "-L", name], capture_output=True, text=True).stdout.split()
    debian[name] = [version.split(",")[0], size(files)]
python = {}
for name in json.loads(sys.argv[1]):
    dist = distribution(name)
    python[name] = [dist.version, size(str(dist.locate_file(f)) for f in dist.files or [])]
print(json.dumps({"command": command, "debian": debian, "python": python, "files": every}))
"""


def measure(image: str) -> dict:
    done = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python", image, "-c", INSIDE, json.dumps(DESKTOP_PYTHON)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        sys.exit(f"bench-desktop-size: the image did not answer: {done.stderr.strip()[-500:]}")
    record = json.loads(done.stdout)
    tar = subprocess.run(
        ["docker", "run", "--rm", "-i", "--network", "none", "--entrypoint", "tar", image, "-cf", "-", "--files-from", "-"],
        input="\n".join(record.pop("files")).encode(),
        capture_output=True,
        timeout=300,
        check=True,
    ).stdout
    record["tar_bytes"], record["gzip_bytes"] = len(tar), len(gzip.compress(tar, 6))
    history = subprocess.run(
        ["docker", "history", "--no-trunc", "--format", "{{.Size}}\t{{.CreatedBy}}", image],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    record["layer"] = next((line.split("\t")[0] for line in history.splitlines() if "tigervnc-standalone-server" in line), "?")
    record["image_bytes"] = int(
        subprocess.run(
            ["docker", "image", "inspect", "-f", "{{.Size}}", image], capture_output=True, text=True, timeout=60, check=True
        ).stdout
    )
    return record


def table(record: dict) -> str:
    rows = [(name, version, size, "Debian") for name, (version, size) in record["debian"].items()]
    rows += [(name, version, size, "PyPI (lock)") for name, (version, size) in record["python"].items()]
    rows.sort(key=lambda row: -row[2])
    total = sum(row[2] for row in rows)
    lines = ["| package | version | from | bytes on disk |", "|---|---|---|---|"]
    lines += [f"| {name} | {version} | {origin} | {size:,} |" for name, version, size, origin in rows]
    lines.append(f"| **all {len(rows)} packages** | | | **{total:,} ({total / 1e6:.1f} MB)** |")
    lines.append("")
    lines.append(
        f"All of them as one tar: {record['tar_bytes'] / 1e6:.1f} MB, gzip-6 {record['gzip_bytes'] / 1e6:.1f} MB. "
        f"The Debian packages' layer (`docker history`): {record['layer']}; the whole image: {record['image_bytes'] / 1e9:.2f} GB."
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("image")
    parser.add_argument("--json", action="store_true", help="the raw record instead of the table")
    args = parser.parse_args()
    record = measure(args.image)
    print(json.dumps(record, indent=1) if args.json else table(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
