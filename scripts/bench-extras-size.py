#!/usr/bin/env python3
"""What gymnasium's extras cost in the image: per group, the bytes of its files uncompressed,
gzip-compressed (level 6, as docker push writes layers) and zstd-compressed (level 3, skopeo's
default), and the image's whole size.

    .venv/bin/python scripts/bench-extras-size.py IMAGE [--whole]

--whole also compresses every layer of the image (`docker save`) with zstd level 3, as the registry
stores it after `--compression zstd`, and prints the sum (the gzip size is what `docker push` reports).

The groups are the Python packages each extra brought into the lock (the packages below) and the
Debian packages of the image's rendering layer (apt's own log of that install). Each group's files
are read out of a container of the image as one tar stream and compressed here.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import subprocess
import sys

GROUPS = {
    "torch (array-api-compat)": ["array-api-compat"],
    "other (moviepy and what it needs, seaborn)": ["moviepy", "decorator", "proglog", "python-dotenv", "seaborn"],
    "mujoco (Python)": ["mujoco", "mujoco-core", "mujoco-studio", "mujoco-studio-wasm", "glfw", "pyopengl", "websockets"],
    "box2d": ["box2d"],
}
RENDERING = "rendering (Debian: glvnd EGL/OpenGL, Mesa llvmpipe)"

# Inside the container: the files of each group, as a JSON map group -> [paths].
LIST_FILES = r"""
import json, re, sys
from importlib.metadata import distribution, PackageNotFoundError
groups = json.loads(sys.argv[1])
out = {}
for name, packages in groups.items():
    files = []
    for package in packages:
        try:
            dist = distribution(package)
        except PackageNotFoundError:
            continue
        files += [str(dist.locate_file(f)) for f in dist.files or []]
    out[name] = files
# The rendering layer: the packages of the apt-get install that brought libegl1, their files.
history = open("/var/log/apt/history.log").read().split("\n\n")
last = [h for h in history if "Install:" in h and "libegl1" in h][-1]
installed = re.findall(r"(\S+?):\S+ \([^)]*\)", last.split("Install:", 1)[1].splitlines()[0])
import subprocess
paths = subprocess.run(["dpkg", "-L", *installed], capture_output=True, text=True).stdout.split()
import os
out[sys.argv[2]] = [p for p in paths if os.path.isfile(p) and not os.path.islink(p)]
out["_debian_packages"] = installed
print(json.dumps(out))
"""


def docker(*args: str, stdin: bytes | None = None) -> bytes:
    return subprocess.run(["docker", *args], input=stdin, capture_output=True, check=True).stdout


def measure(image: str, files: list[str]) -> dict:
    """Sizes of the tar of `files` as read from a container of `image`."""
    if not files:
        return {"files": 0, "uncompressed": 0, "gzip": 0, "zstd": 0}
    data = docker(
        "run", "--rm", "-i", "--entrypoint", "tar", image, "-cf", "-", "--files-from", "-", stdin="\n".join(files).encode()
    )
    zstd = subprocess.run(["zstd", "-3", "-c"], input=data, capture_output=True, check=True).stdout
    return {"files": len(files), "uncompressed": len(data), "gzip": len(gzip.compress(data, 6)), "zstd": len(zstd)}


def whole_image(image: str) -> dict:
    """Every layer of `image` (docker save's tar) compressed as a registry stores it: the sums."""
    import tarfile

    sums = {"layers": 0, "uncompressed": 0, "zstd": 0}
    save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
    with tarfile.open(fileobj=save.stdout, mode="r|") as archive:
        for member in archive:
            if not member.isfile() or not (member.name.endswith("/layer.tar") or member.name.startswith("blobs/")):
                continue
            data = archive.extractfile(member).read()
            if len(data) < 512:  # docker save's json files, not layers
                continue
            zstd = subprocess.run(["zstd", "-3", "-T0", "-c"], input=data, capture_output=True, check=True).stdout
            sums["layers"] += 1
            sums["uncompressed"] += len(data)
            sums["zstd"] += len(zstd)
    save.wait()
    return sums


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("image")
    parser.add_argument("--whole", action="store_true", help="also compress every layer of the image (slow: minutes)")
    args = parser.parse_args()
    listed = json.loads(
        docker("run", "--rm", "--entrypoint", "python3", args.image, "-c", LIST_FILES, json.dumps(GROUPS), RENDERING)
    )
    debian = listed.pop("_debian_packages")
    size = int(docker("image", "inspect", "--format", "{{.Size}}", args.image).decode())
    print(f"{args.image}: {size / 1e9:.2f} GB uncompressed; {platform.machine()}, Python {platform.python_version()}")
    print(f"{'group':48} {'files':>6} {'MB':>8} {'gzip MB':>8} {'zstd MB':>8}")
    total = {"uncompressed": 0, "gzip": 0, "zstd": 0}
    for name, files in listed.items():
        found = measure(args.image, files)
        for key in total:
            total[key] += found[key]
        print(
            f"{name:48} {found['files']:6} {found['uncompressed'] / 1e6:8.1f} {found['gzip'] / 1e6:8.1f} {found['zstd'] / 1e6:8.1f}"
        )
    print(f"{'all of them':48} {'':6} {total['uncompressed'] / 1e6:8.1f} {total['gzip'] / 1e6:8.1f} {total['zstd'] / 1e6:8.1f}")
    print(f"Debian packages of the rendering layer: {', '.join(debian)}")
    if args.whole:
        sums = whole_image(args.image)
        print(
            f"whole image, {sums['layers']} layers: {sums['uncompressed'] / 1e9:.2f} GB as tar, zstd -3 {sums['zstd'] / 1e9:.2f} GB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
