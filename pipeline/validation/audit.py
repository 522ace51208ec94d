"""Vulnerability audit of the image's Python packages against OSV advisories, offline.

The records come from pipeline/validation/advisories.py (the committed snapshot or
`--advisories`). Matching uses the records' version ranges and lists, with PEP
440 ordering from `packaging`. Severity is the database's own level, else the
CVSS v3 base rating computed from the record's vector, else UNKNOWN. High and
critical findings fail validation unless the allowlist
(images/audit-allowlist.toml) names them with a reason and an expiry date that
has not passed. A finding whose severity no record states (UNKNOWN) fails too:
nothing says it is below HIGH. MEDIUM and LOW are reported and do not fail.
"""

from __future__ import annotations

import datetime as dt
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from pipeline.errors import UsageError
from pipeline.variants import REPO_ROOT
from smoke.rules import normalize_name

ALLOWLIST_PATH = REPO_ROOT / "images" / "audit-allowlist.toml"
FAILING = {"HIGH", "CRITICAL", "UNKNOWN"}  # UNKNOWN: no record says it is below HIGH


MAX_ALLOW_DAYS = 184  # an accepted finding is looked at again within six months


@dataclass(frozen=True)
class Allowed:
    """A finding accepted on purpose: which advisory, in which package (and versions), why, until when."""

    id: str
    package: str
    reason: str
    expires: dt.date
    versions: tuple[str, ...] = ()  # empty: every version of the package
    affects: str = ""  # what an attacker needs, in the image's terms
    fixed: str = ""  # the first release without it

    def covers(self, ids: set[str], package: str, version: str) -> bool:
        return self.id in ids and self.package == normalize_name(package) and (not self.versions or version in self.versions)


def load_allowlist(path: Path = ALLOWLIST_PATH, today: dt.date | None = None) -> list[Allowed]:
    """The accepted findings; an entry that expires more than six months after `today` is refused."""
    if not path.exists():
        return []
    try:
        data = tomllib.loads(path.read_text())
        entries = [
            Allowed(
                id=e["id"], package=normalize_name(e["package"]), reason=e["reason"], expires=e["expires"],
                versions=tuple(e.get("versions", ())), affects=e.get("affects", ""), fixed=e.get("fixed", ""),
            )
            for e in data.get("allow", [])
        ]  # fmt: skip
    except (tomllib.TOMLDecodeError, KeyError, TypeError) as err:
        raise UsageError(f"{path}: each [[allow]] needs id, package, reason and expires (a date): {err}") from None
    today = today or dt.date.today()
    for entry in entries:
        if not isinstance(entry.expires, dt.date) or not entry.reason.strip():
            raise UsageError(f"{path}: {entry.id} ({entry.package}) needs a reason and an expires date")
        if (entry.expires - today).days > MAX_ALLOW_DAYS:
            raise UsageError(
                f"{path}: {entry.id} ({entry.package}) expires {entry.expires}, more than six months away; "
                "accept a finding for at most six months, then look at it again"
            )
    return entries


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


# CVSS v3.x base metrics (FIRST, CVSS v3.1 specification, section 7.4).
_CVSS3 = {
    "AV": {"N": 0.85, "A": 0.62, "L": 0.55, "P": 0.2},
    "AC": {"L": 0.77, "H": 0.44},
    "UI": {"N": 0.85, "R": 0.62},
    "CIA": {"H": 0.56, "L": 0.22, "N": 0.0},  # Confidentiality, Integrity and Availability share one scale
}
_PR = {"U": {"N": 0.85, "L": 0.62, "H": 0.27}, "C": {"N": 0.85, "L": 0.68, "H": 0.5}}


def _roundup(value: float) -> float:
    """CVSS v3.1 Roundup: the smallest one-decimal number >= value, free of float noise."""
    scaled = round(value * 100_000)
    return scaled / 100_000 if scaled % 10_000 == 0 else (scaled // 10_000 + 1) / 10


def cvss3_base_score(vector: str) -> float:
    """Base score of a CVSS:3.0 or CVSS:3.1 vector such as CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H."""
    parts = vector.split("/")
    if not parts[0].startswith("CVSS:3"):
        raise ValueError(f"not a CVSS v3 vector: {vector}")
    m = dict(p.split(":", 1) for p in parts[1:])
    scope = m["S"]
    iss = 1 - (1 - _CVSS3["CIA"][m["C"]]) * (1 - _CVSS3["CIA"][m["I"]]) * (1 - _CVSS3["CIA"][m["A"]])
    impact = 6.42 * iss if scope == "U" else 7.52 * (iss - 0.029) - 3.25 * (iss - 0.02) ** 15
    exploitability = 8.22 * _CVSS3["AV"][m["AV"]] * _CVSS3["AC"][m["AC"]] * _PR[scope][m["PR"]] * _CVSS3["UI"][m["UI"]]
    if impact <= 0:
        return 0.0
    total = impact + exploitability if scope == "U" else 1.08 * (impact + exploitability)
    return _roundup(min(total, 10.0))


def rating(score: float) -> str:
    if score == 0:
        return "NONE"
    return "LOW" if score < 4 else "MEDIUM" if score < 7 else "HIGH" if score < 9 else "CRITICAL"


def severity(record: dict) -> str:
    """The database's own level (GHSA's database_specific.severity), else the CVSS v3 base rating, else UNKNOWN."""
    level = str((record.get("database_specific") or {}).get("severity") or "").upper()
    if level:
        return "MEDIUM" if level == "MODERATE" else level
    for entry in record.get("severity") or []:
        if entry.get("type") == "CVSS_V3":
            try:
                return rating(cvss3_base_score(entry.get("score", "")))
            except (KeyError, ValueError):
                continue
    return "UNKNOWN"


def matches(record: dict, name: str, version: str) -> bool:
    try:
        ver = Version(version)
    except InvalidVersion:
        return False
    for affected in record.get("affected", []):
        pkg = affected.get("package", {})
        if pkg.get("ecosystem") != "PyPI" or normalize_name(pkg.get("name", "")) != normalize_name(name):
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


_RANK = ["NONE", "LOW", "MEDIUM", "HIGH", "CRITICAL"]


def _group(records: list[dict]) -> list[list[dict]]:
    """Records that name each other by ID or alias (PYSEC-x, GHSA-y, CVE-z) describe one vulnerability."""
    groups: list[tuple[set[str], list[dict]]] = []
    for record in records:
        ids = {record.get("id", ""), *record.get("aliases", [])} - {""}
        joined = [g for g in groups if g[0] & ids]
        groups = [g for g in groups if not g[0] & ids]
        groups.append((ids.union(*(g[0] for g in joined)), [r for g in joined for r in g[1]] + [record]))
    return [g[1] for g in groups]


def _finding(group: list[dict], pkg: dict) -> dict:
    known = [level for level in map(severity, group) if level in _RANK]
    ids = sorted({i for r in group for i in (r.get("id", ""), *r.get("aliases", [])) if i} - {group[0].get("id")})
    return {
        "id": group[0].get("id"),
        "aliases": ids,
        "package": pkg["name"],
        "version": pkg["version"],
        "severity": max(known, key=_RANK.index) if known else "UNKNOWN",
        "summary": next((text for r in group if (text := r.get("summary") or r.get("details"))), "").strip()[:200],
    }


def audit(packages: list[dict], records: list[dict], allowlist: list[Allowed], today: dt.date | None = None) -> dict:
    """Findings for `packages` ([{name, version}]); status "pass" or "fail".

    Records that alias each other make one finding, with the highest severity any
    of them states. Withdrawn records are ignored. A finding fails unless its
    severity is known to be below HIGH (UNKNOWN fails) or the allowlist names it.
    """
    today = today or dt.date.today()
    live = [r for r in records if not r.get("withdrawn")]
    findings, allowed, expired = [], [], []
    for pkg in packages:
        for group in _group([r for r in live if matches(r, pkg["name"], pkg["version"])]):
            finding = _finding(group, pkg)
            ids = {finding["id"], *finding["aliases"]}
            entry = next((a for a in allowlist if a.covers(ids, pkg["name"], pkg["version"])), None)
            if entry and entry.expires >= today:
                allowed.append(
                    {
                        **finding,
                        "reason": entry.reason,
                        "expires": entry.expires.isoformat(),
                        "affects": entry.affects,
                        "fixed": entry.fixed,
                    }
                )
            else:
                if entry:
                    expired.append({"id": entry.id, "package": entry.package, "expired": entry.expires.isoformat()})
                findings.append(finding)
    failing = [f for f in findings if f["severity"] in FAILING]
    return {
        "status": "fail" if failing else "pass",
        "accepted": [f"{f['id']} ({f['severity']}) in {f['package']} {f['version']}" for f in allowed],
        "records": len(records),
        "packages": len(packages),
        "findings": findings,
        "failing": [f"{f['id']} ({f['severity']}) in {f['package']} {f['version']}" for f in failing],
        "allowed": allowed,
        "expired_allowlist": expired,
    }


def word(result: dict) -> str:
    """What the audit says in one word: fail, stale (passed on data past its age), or pass."""
    if result["status"] == "fail":
        return "fail"
    return "stale" if result.get("stale") else "pass"


def carried(variant, records: list[dict], allowlist: list[Allowed], today: dt.date | None = None) -> list[dict]:
    """The known HIGH/CRITICAL advisories a line carries in its pins, each marked accepted or not."""
    result = audit([{"name": name, "version": version} for name, version in variant.pins()], records, allowlist, today)
    rows = [{**f, "accepted": True} for f in result["allowed"]] + [{**f, "accepted": False} for f in result["findings"]]
    order = {"CRITICAL": 0, "HIGH": 1, "UNKNOWN": 2}
    return sorted((r for r in rows if r["severity"] in FAILING), key=lambda r: (order[r["severity"]], r["id"]))


def carried_summary(rows: list[dict]) -> str:
    """'none known', or '2 high (accepted)' / '1 critical, 8 high (accepted)'."""
    if not rows:
        return "none known"
    counts = {level: sum(r["severity"] == level for r in rows) for level in ("CRITICAL", "HIGH", "UNKNOWN")}
    text = ", ".join(f"{n} {level.lower()}" for level, n in counts.items() if n)
    open_ = sum(not r["accepted"] for r in rows)
    return text + (" (accepted)" if not open_ else f" ({open_} not accepted: the build fails)")
