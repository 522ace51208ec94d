"""What must never be in an image: secrets, keys, proxy CAs, .git folders, pip caches.

`scan_image` runs SCANNER inside a container of the image (as root, so nothing
is unreadable), and checks the image's history (every RUN line and build
argument) on the host. Findings are one line each; any finding fails validation.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

# Runs inside the image with its python3; stdlib only; prints one JSON list.
SCANNER = r"""
import json, os, re, stat, sys
ca_fingerprints = set(sys.argv[1:])
findings = []
SKIP_DIRS = {"/proc", "/sys", "/dev"}
NAME_RULES = [
    (re.compile(r"^ssh_host_.*_key(\.pub)?$"), "SSH host key"),
    (re.compile(r"^authorized_keys2?$"), "authorized_keys"),
    (re.compile(r"^id_(rsa|dsa|ecdsa|ed25519)$"), "SSH private key"),
    (re.compile(r"^\.(netrc|pypirc|git-credentials)$"), "credentials file"),
    (re.compile(r"^jpserver-.*\.json$|^jupyter_cookie_secret$"), "Jupyter runtime secret"),
    (re.compile(r"^nvcc$"), "CUDA compiler (runtime images carry none)"),
]
# A real key: the header followed by base64 lines (programs only carry the header).
PRIVATE = re.compile(rb"-----BEGIN (RSA |EC |DSA |OPENSSH |ENCRYPTED )?PRIVATE KEY-----\r?\n[A-Za-z0-9+/=]{40,}")
TOKEN = re.compile(rb"\b(ghp_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{50,}|glpat-[A-Za-z0-9_-]{20}|xox[baprs]-[0-9]{8,}-[A-Za-z0-9-]{10,})\b")
# Test fixtures that ship inside well-known wheels (tornado, certifi test data, ...).
FIXTURE = re.compile(r"/site-packages/[^/]+/(tests?|testing|test_data)/")
for root, dirs, files in os.walk("/", topdown=True):
    if root in SKIP_DIRS:
        dirs[:] = []
        continue
    for d in dirs:
        full = os.path.join(root, d)
        if d == ".git":
            findings.append(f".git folder: {full}")
        elif full.endswith("/.cache/pip") and os.listdir(full):
            findings.append(f"pip cache: {full}")
    for name in files:
        full = os.path.join(root, name)
        for rule, what in NAME_RULES:
            if rule.search(name):
                findings.append(f"{what}: {full}")
        try:
            st = os.lstat(full)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_size > 1_000_000 or FIXTURE.search(full) or name.endswith(".pyc"):
            continue
        if full.startswith(("/usr/share/doc/", "/usr/lib/python3/dist-packages/")):
            continue
        try:
            with open(full, "rb") as f:
                data = f.read()
        except OSError:
            continue
        if PRIVATE.search(data):
            findings.append(f"private key: {full}")
        elif TOKEN.search(data):
            findings.append(f"access token: {full}")
        if ca_fingerprints and b"-----BEGIN CERTIFICATE-----" in data and not full.startswith(("/etc/ssl/certs/", "/usr/share/ca-certificates/")):
            body = b"".join(data.split())
            for fp in ca_fingerprints:
                if fp.encode() in body:
                    findings.append(f"build CA certificate: {full}")
print(json.dumps(sorted(set(findings))))
"""

_HISTORY_RULES = (
    (re.compile(r"(?i)(password|passwd|secret|token|api[_-]?key)=\S+"), "a credential in a build step"),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), "a private key in a build step"),
    (re.compile(r"(?i)PIP_CERT=(?!/run/secrets/)\S+"), "a CA file outside BuildKit secrets"),
)


def ca_markers(ca_cert: Path | None) -> list[str]:
    """Pieces of the build CA's certificates that would show a copy of it in the image.

    The system bundle of the build host mostly holds public roots that the image
    legitimately has too; only certificates absent from Debian's bundle (a
    proxy's own CA) are looked for, by a 64-character slice of their base64.
    """
    if ca_cert is None or not ca_cert.is_file():
        return []
    public = Path("/usr/share/ca-certificates")
    known = b"".join(p.read_bytes() for p in public.rglob("*.crt")) if public.is_dir() else b""
    known = b"".join(known.split())
    markers = []
    for block in re.findall(rb"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", ca_cert.read_bytes(), re.S):
        body = b"".join(block.split())
        if body[:200] not in known:
            markers.append(body[100:164].decode())
    return markers


def history_findings(client, image_id: str) -> list[str]:
    findings = []
    for entry in client.api.history(image_id):
        created_by = entry.get("CreatedBy", "")
        for rule, what in _HISTORY_RULES:
            if rule.search(created_by):
                findings.append(f"{what}: {created_by[:120]}")
    return findings


def scan_image(client, image_id: str, ca_cert: Path | None, timeout_s: int = 600) -> list[str]:
    """Every finding, one line each (empty list: clean)."""
    container = client.containers.create(
        image_id,
        entrypoint=["python3", "-c", SCANNER, *ca_markers(ca_cert)],
        user="0",
        network_disabled=True,
        labels={"io.proven-torch.role": "validation"},
    )
    try:
        container.start()
        exit_code = container.wait(timeout=timeout_s)["StatusCode"]
        output = container.logs(stdout=True, stderr=False).decode(errors="replace").strip()
        if exit_code != 0:
            return [f"the hygiene scan itself failed (exit {exit_code}): {container.logs().decode(errors='replace')[-300:]}"]
    finally:
        container.remove(force=True, v=True)
    return json.loads(output.splitlines()[-1]) + history_findings(client, image_id)
