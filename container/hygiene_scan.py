#!/usr/bin/env python3
"""Look through a file system for what must never ship in an image.

    python3 hygiene_scan.py [--root /] [--ca-marker BASE64-SLICE ...]

Prints one JSON list of findings ("what: path"), sorted; an empty list is clean.
build.py runs it inside every image it validates (as root, so nothing is
unreadable, with no network); stdlib only, so it runs on any Python 3.
--ca-marker: slices of the build's proxy CA certificates (pipeline/validation/hygiene.py
makes them); a copy of that CA anywhere but the system bundle is a finding.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat

SKIP_DIRS = ("/proc", "/sys", "/dev")
NAME_RULES = (
    (re.compile(r"^ssh_host_.*_key(\.pub)?$"), "SSH host key"),
    (re.compile(r"^authorized_keys2?$"), "authorized_keys"),
    (re.compile(r"^id_(rsa|dsa|ecdsa|ed25519)$"), "SSH private key"),
    (re.compile(r"^\.(netrc|pypirc|git-credentials)$"), "credentials file"),
    (re.compile(r"^jpserver-.*\.json$|^jupyter_cookie_secret$"), "Jupyter runtime secret"),
    (re.compile(r"^nvcc$"), "CUDA compiler (runtime images carry none)"),
)
# A real key: the header followed by base64 lines (programs only carry the header).
PRIVATE_KEY = re.compile(rb"-----BEGIN (RSA |EC |DSA |OPENSSH |ENCRYPTED )?PRIVATE KEY-----\r?\n[A-Za-z0-9+/=]{40,}")
TOKEN = re.compile(
    rb"\b(ghp_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{50,}|glpat-[A-Za-z0-9_-]{20}|xox[baprs]-[0-9]{8,}-[A-Za-z0-9-]{10,})\b"
)
# Test fixtures that ship inside well-known wheels (tornado, certifi test data, ...).
FIXTURE = re.compile(r"/site-packages/[^/]+/(tests?|testing|test_data)/")
NOT_READ = ("/usr/share/doc/", "/usr/lib/python3/dist-packages/")
SYSTEM_CA_DIRS = ("/etc/ssl/certs/", "/usr/share/ca-certificates/")
MAX_READ = 1_000_000


def content_findings(path: str, data: bytes, ca_markers: list[str]) -> list[str]:
    """What the bytes of one file give away (`path` as the image sees it)."""
    found = []
    if PRIVATE_KEY.search(data):
        found.append(f"private key: {path}")
    elif TOKEN.search(data):
        found.append(f"access token: {path}")
    if ca_markers and b"-----BEGIN CERTIFICATE-----" in data and not path.startswith(SYSTEM_CA_DIRS):
        body = b"".join(data.split())
        if any(marker.encode() in body for marker in ca_markers):
            found.append(f"build CA certificate: {path}")
    return found


def scan(root: str, ca_markers: list[str]) -> list[str]:
    """Every finding under `root`; paths are reported as the image sees them (relative to root, from /)."""
    root = os.path.abspath(root)
    findings = []

    def shown(full: str) -> str:
        return "/" + os.path.relpath(full, root) if root != "/" else full

    for current, dirs, files in os.walk(root, topdown=True):
        if shown(current) in SKIP_DIRS:
            dirs[:] = []
            continue
        for name in dirs:
            full = os.path.join(current, name)
            if name == ".git":
                findings.append(f".git folder: {shown(full)}")
            elif shown(full).endswith("/.cache/pip") and os.listdir(full):
                findings.append(f"pip cache: {shown(full)}")
        for name in files:
            full = os.path.join(current, name)
            path = shown(full)
            findings += [f"{what}: {path}" for rule, what in NAME_RULES if rule.search(name)]
            try:
                info = os.lstat(full)
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_READ or FIXTURE.search(path) or name.endswith(".pyc"):
                continue
            if path.startswith(NOT_READ):
                continue
            try:
                with open(full, "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            findings += content_findings(path, data, ca_markers)
    return sorted(set(findings))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="/", help="the file system to scan (default: /)")
    parser.add_argument("--ca-marker", action="append", default=[], help="a slice of the build CA's base64 to look for")
    args = parser.parse_args(argv)
    print(json.dumps(scan(args.root, args.ca_marker)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
