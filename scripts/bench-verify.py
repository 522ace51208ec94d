#!/usr/bin/env python3
"""Time `build.py verify` against a pushed, signed image: five runs, each a fresh process as a
user runs it, the median and the range, with the machine it ran on.

    .venv/bin/python scripts/bench-verify.py localhost:5000/proven-torch-test:2.9-cu128 KEY.pub
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("image_ref")
    parser.add_argument("public_key", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    seconds = []
    for run in range(args.runs):
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "build.py", "verify", args.image_ref, "--key", str(args.public_key)],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        seconds.append(time.perf_counter() - start)
        if done.returncode != 0:
            print(f"run {run + 1}: verify exited {done.returncode}: {done.stderr.strip()}", file=sys.stderr)
            return 1
        print(f"run {run + 1}: {seconds[-1]:.2f} s", flush=True)
    print(
        f"verify {args.image_ref}: median {statistics.median(seconds):.2f} s (min {min(seconds):.2f}, max {max(seconds):.2f}) "
        f"over {args.runs} runs; {cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
