"""Vulnerability audit of the image's Python packages against OSV advisories, offline.

The advisory database is a folder (or zip) of OSV records for PyPI, the format
OSV publishes for download (osv.dev: `PyPI/all.zip`) and that GitHub's advisory
database uses. Matching uses the records' version ranges and lists, with PEP 440
ordering from `packaging`. High and critical findings fail validation unless the
allowlist (images/audit-allowlist.toml) names them with a reason and an expiry
date that has not passed. No database given: the audit says "not run", never
"pass".
"""

from __future__ import annotations

import datetime as dt
import json
import re
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from pipeline.errors import UsageError
from pipeline.variants import REPO_ROOT

ALLOWLIST_PATH = REPO_ROOT / "images" / "audit-allowlist.toml"
FAILING = {"HIGH", "CRITICAL"}


@dataclass(frozen=True)
class Allowed:
    id: str
    package: str
    reason: str
    expires: dt.date


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def load_records(source: Path) -> list[dict]:
    """Every OSV record in a folder of .json files or a zip of them."""
    if not source.exists():
        raise UsageError(f"--advisories {source}: no such folder or zip; pass OSV records for PyPI (osv.dev PyPI/all.zip)")
    texts: list[bytes] = []
    if source.is_file() and zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as zf:
            texts = [zf.read(n) for n in zf.namelist() if n.endswith(".json")]
    else:
        texts = [p.read_bytes() for p in sorted(source.rglob("*.json"))]
    records = []
    for text in texts:
        try:
            records.append(json.loads(text))
        except ValueError:
            continue
    return records


def load_allowlist(path: Path = ALLOWLIST_PATH) -> list[Allowed]:
    if not path.exists():
        return []
    try:
        data = tomllib.loads(path.read_text())
        return [
            Allowed(id=e["id"], package=_norm(e["package"]), reason=e["reason"], expires=e["expires"])
            for e in data.get("allow", [])
        ]
    except (tomllib.TOMLDecodeError, KeyError, TypeError) as err:
        raise UsageError(f"{path}: each [[allow]] needs id, package, reason and expires (a date): {err}") from None


def _in_range(version: Version, events: list[dict]) -> bool:
    """OSV ECOSYSTEM range semantics: introduced opens, fixed / last_affected close."""
    affected = False
    for event in sorted(events, key=lambda e: _event_key(e)):
        if "introduced" in event:
            start = event["introduced"]
            if start == "0" or version >= Version(start):
                affected = True
        elif "fixed" in event and version >= Version(event["fixed"]):
            affected = False
        elif "last_affected" in event and version > Version(event["last_affected"]):
            affected = False
    return affected


def _event_key(event: dict) -> Version:
    value = next(iter(event.values()))
    try:
        return Version("0") if value == "0" else Version(value)
    except InvalidVersion:
        return Version("0")


def severity(record: dict) -> str:
    level = str((record.get("database_specific") or {}).get("severity") or "").upper()
    if level == "MODERATE":
        return "MEDIUM"
    return level or "UNKNOWN"


def matches(record: dict, name: str, version: str) -> bool:
    try:
        ver = Version(version)
    except InvalidVersion:
        return False
    for affected in record.get("affected", []):
        pkg = affected.get("package", {})
        if pkg.get("ecosystem") != "PyPI" or _norm(pkg.get("name", "")) != _norm(name):
            continue
        if version in affected.get("versions", []):
            return True
        for rng in affected.get("ranges", []):
            if rng.get("type") == "ECOSYSTEM":
                try:
                    if _in_range(ver, rng.get("events", [])):
                        return True
                except InvalidVersion:
                    continue
    return False


def audit(packages: list[dict], records: list[dict], allowlist: list[Allowed], today: dt.date | None = None) -> dict:
    """Findings for `packages` ([{name, version}]); status "pass" or "fail"."""
    today = today or dt.date.today()
    findings, allowed, expired = [], [], []
    for pkg in packages:
        for record in records:
            if not matches(record, pkg["name"], pkg["version"]):
                continue
            ids = {record.get("id", ""), *record.get("aliases", [])}
            finding = {
                "id": record.get("id"),
                "aliases": record.get("aliases", []),
                "package": pkg["name"],
                "version": pkg["version"],
                "severity": severity(record),
                "summary": (record.get("summary") or "")[:200],
            }
            entry = next((a for a in allowlist if a.id in ids and a.package == _norm(pkg["name"])), None)
            if entry and entry.expires >= today:
                allowed.append({**finding, "reason": entry.reason, "expires": entry.expires.isoformat()})
            else:
                if entry:
                    expired.append({"id": entry.id, "package": entry.package, "expired": entry.expires.isoformat()})
                findings.append(finding)
    failing = [f for f in findings if f["severity"] in FAILING]
    return {
        "status": "fail" if failing else "pass",
        "records": len(records),
        "packages": len(packages),
        "findings": findings,
        "failing": [f"{f['id']} ({f['severity']}) in {f['package']} {f['version']}" for f in failing],
        "allowed": allowed,
        "expired_allowlist": expired,
    }


def not_run(reason: str) -> dict:
    return {"status": "not run", "reason": reason, "findings": [], "failing": []}
