"""What must never be in an image (docs/supply-chain.md, "Hygiene scan"): the image's own scanner run in a
container of it, and its history (every RUN line and build argument) checked on the host. Any finding fails."""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.containers import json_answer, run_in_image

# The scanner is the image's own tool (container/hygiene_scan.py, unit-tested on a planted tree).
SCANNER = "/opt/proven-torch/container/hygiene_scan.py"

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


def scan_image(client, image_id: str, ca_cert: Path | None, timeout_s: float = 600) -> list[str]:
    """Every finding, one line each (empty list: clean); ValidationFailed when the scan itself failed."""
    markers = [f"--ca-marker={m}" for m in ca_markers(ca_cert)]
    done = run_in_image(
        client,
        image_id,
        [SCANNER, *markers],
        entrypoint=["python3"],
        user="0",
        network=False,
        timeout_s=timeout_s,
        what="the hygiene scan",
    )
    findings = json_answer(done, "the hygiene scan")  # a scan that failed fails its stage (gate.validate_image)
    for entry in client.api.history(image_id):  # every RUN line and build argument
        created_by = entry.get("CreatedBy", "")
        for rule, what in _HISTORY_RULES:
            if rule.search(created_by):
                findings.append(f"{what}: {created_by[:120]}")
    return findings
