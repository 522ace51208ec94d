"""Vulnerability audit of the image's Python packages against OSV advisories, offline. The rules
(irregular versions read as their release, unreadable events counted as affecting, the highest severity
any record states, what fails and what the allowlist accepts) are docs/supply-chain.md's "Vulnerability
audit"; this module is where they are implemented, once."""

from __future__ import annotations

import datetime as dt
import re
import tomllib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from cvss import CVSS2, CVSS3, CVSS4
from cvss.exceptions import CVSSError
from packaging.version import InvalidVersion, Version

from common.rules import FAILING_SEVERITIES, normalize_name
from pipeline.errors import UsageError
from pipeline.lock import locked_packages
from pipeline.validation.advisories import load_snapshot
from pipeline.variants import REPO_ROOT

ALLOWLIST_PATH = REPO_ROOT / "images" / "audit-allowlist.toml"
_RANK = ["NONE", "LOW", "MEDIUM", "HIGH", "CRITICAL"]
NO_FIX = "no fix stated"


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
                id=e["id"],
                package=normalize_name(e["package"]),
                reason=e["reason"],
                expires=e["expires"],
                versions=tuple(e.get("versions", ())),
                affects=e.get("affects", ""),
                fixed=e.get("fixed", ""),
            )
            for e in data.get("allow", [])
        ]
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


# RELEASE-TAG: a release of at least two numbers, then a tag that starts with a letter.
_TAGGED = re.compile(r"(?P<release>\d+(?:\.\d+)+)-(?P<tag>[A-Za-z].*)")
_CLOSING = ("fixed", "last_affected")


@dataclass(frozen=True)
class Reading:
    """How one record's data about one package was read, and what it says of the version."""

    affected: bool
    by_rule: tuple[str, ...] = ()  # what the documented rules read, e.g. "last_affected 2.6.0-cu124 read as 2.6.0"
    unreadable: tuple[str, ...] = ()  # raw text no rule reads: the record counts as affecting the package


def read_version(raw: str) -> tuple[Version, bool] | None:
    """(version, read by the RELEASE-TAG rule) for one OSV event value; None when nothing reads it."""
    try:
        return Version(raw), False
    except InvalidVersion:
        tagged = _TAGGED.fullmatch(raw)
        return (Version(tagged["release"]), True) if tagged else None


def _read_range(version: Version, events: list[dict]) -> Reading:
    """OSV ECOSYSTEM range semantics: `introduced` opens, `fixed` (exclusive) / `last_affected` close."""
    parsed: list[tuple[Version, bool, str]] = []
    by_rule: list[str] = []
    unreadable: list[str] = []
    for event in events:
        kind = next((k for k in ("introduced", *_CLOSING) if k in event), None)
        if kind is None:  # "limit" and the like bound where to look, not what is affected
            continue
        raw = str(event[kind])
        read = (Version("0"), False) if kind == "introduced" and raw == "0" else read_version(raw)
        if read is None:
            unreadable.append(f"{kind}: {raw}")
            continue
        value, tagged = read
        if tagged:
            closes = "last_affected" if kind in _CLOSING else kind  # a tagged fix may be a later build
            by_rule.append(f"{kind} {raw} read as {closes} {value}")
            kind = closes
        parsed.append((value, kind != "introduced", kind))
    if unreadable:
        return Reading(True, tuple(by_rule), tuple(unreadable))
    intervals: list[tuple[Version, tuple[str, Version] | None]] = []
    start: Version | None = None
    end: tuple[str, Version] | None = None
    for value, _, kind in sorted(parsed):
        if kind == "introduced":
            if start is not None and end is not None:
                intervals.append((start, end))
                start, end = None, None
            start = value if start is None else start
        elif start is not None:
            if end is not None:
                by_rule.append(f"several ends after introduced {start}: read the latest, {kind} {value}")
            end = (kind, value)
    if start is not None:
        intervals.append((start, end))

    def inside(low: Version, high: tuple[str, Version] | None) -> bool:
        if version < low:
            return False
        return high is None or (version < high[1] if high[0] == "fixed" else version <= high[1])

    return Reading(any(inside(low, high) for low, high in intervals), tuple(by_rule))


def read(record: dict, name: str, version: str) -> Reading | None:
    """What `record` says of package `name` at `version`; None when it names no such PyPI package."""
    readings = []
    for affected in record.get("affected", []):
        pkg = affected.get("package", {})
        if pkg.get("ecosystem") != "PyPI" or normalize_name(pkg.get("name", "")) != normalize_name(name):
            continue
        listed = version in affected.get("versions", [])
        readings.append(Reading(listed))
        try:
            ver = Version(version)
        except InvalidVersion:
            readings.append(Reading(True, unreadable=(f"installed version {version}",)))
            continue
        readings += [_read_range(ver, r.get("events", [])) for r in affected.get("ranges", []) if r.get("type") == "ECOSYSTEM"]
    if not readings:
        return None
    return Reading(
        any(r.affected for r in readings),
        tuple(text for r in readings for text in r.by_rule),
        tuple(text for r in readings for text in r.unreadable),
    )


def rating(score: float) -> str:
    if score == 0:
        return "NONE"
    return "LOW" if score < 4 else "MEDIUM" if score < 7 else "HIGH" if score < 9 else "CRITICAL"


_VECTORS = {"CVSS_V2": CVSS2, "CVSS_V3": CVSS3, "CVSS_V4": CVSS4}


def vector_rating(kind: str, vector: str) -> str | None:
    """The rating of a CVSS v2/v3/v4 base vector, scored by the `cvss` library; None when it does not parse."""
    scorer = _VECTORS.get(kind)
    if scorer is None:
        return None
    try:
        return rating(float(scorer(vector).base_score))
    except (CVSSError, ValueError, KeyError, TypeError):
        return None


def severity(record: dict) -> str:
    """The highest level the record states: the database's own (GHSA's database_specific.severity) or
    any CVSS vector's rating; UNKNOWN when it states none."""
    levels: list[str | None] = []
    level = str((record.get("database_specific") or {}).get("severity") or "").upper()
    if level:
        levels.append("MEDIUM" if level == "MODERATE" else level)
    levels += [vector_rating(entry.get("type", ""), entry.get("score", "")) for entry in record.get("severity") or []]
    known = [lv for lv in levels if lv in _RANK]
    return max(known, key=_RANK.index) if known else "UNKNOWN"


def _group(records: list[dict]) -> list[list[dict]]:
    """Records that name each other by ID or alias (PYSEC-x, GHSA-y, CVE-z) describe one vulnerability."""
    groups: list[tuple[set[str], list[dict]]] = []
    for record in records:
        ids = {record.get("id", ""), *record.get("aliases", [])} - {""}
        joined = [g for g in groups if g[0] & ids]
        groups = [g for g in groups if not g[0] & ids]
        groups.append((ids.union(*(g[0] for g in joined)), [r for g in joined for r in g[1]] + [record]))
    return [g[1] for g in groups]


def stated_fix(group: list[dict], name: str, version: str) -> str:
    """The first release after `version` that a record of the group names as `fixed` for the package,
    or "no fix stated" (a record that says only `last_affected` names no fix)."""
    fixes = []
    for record in group:
        for affected in record.get("affected", []):
            if normalize_name(affected.get("package", {}).get("name", "")) != normalize_name(name):
                continue
            for rng in affected.get("ranges", []):
                fixes += [read_version(str(e["fixed"])) for e in rng.get("events", []) if "fixed" in e]
    try:
        installed = Version(version)
    except InvalidVersion:
        return NO_FIX
    later = sorted(v for v, _ in filter(None, fixes) if v > installed)
    return str(later[0]) if later else NO_FIX


def _finding(group: list[dict], pkg: dict, unreadable: dict[str, list[str]]) -> dict:
    known = [level for level in map(severity, group) if level in _RANK]
    ids = sorted({i for r in group for i in (r.get("id", ""), *r.get("aliases", [])) if i} - {group[0].get("id")})
    finding = {
        "id": group[0].get("id"),
        "aliases": ids,
        "package": pkg["name"],
        "version": pkg["version"],
        "severity": max(known, key=_RANK.index) if known else "UNKNOWN",
        "fixed": stated_fix(group, pkg["name"], pkg["version"]),
        "summary": next((text for r in group if (text := r.get("summary") or r.get("details"))), "").strip()[:200],
    }
    raw = [f"{r['id']}: {text}" for r in group for text in unreadable.get(r["id"], [])]
    return finding | ({"unreadable": raw} if raw else {})


def _by_package(records: list[dict]) -> dict[str, list[dict]]:
    """Live records under each PyPI package name they name (normalized)."""
    index: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        if record.get("withdrawn"):
            continue
        names = {
            normalize_name(a.get("package", {}).get("name", ""))
            for a in record.get("affected", [])
            if a.get("package", {}).get("ecosystem") == "PyPI"
        }
        for name in names:
            index[name].append(record)
    return index


def _label(finding: dict) -> str:
    return f"{finding['id']} ({finding['severity']}) in {finding['package']} {finding['version']}"


def audit(packages: list[dict], records: list[dict], allowlist: list[Allowed], today: dt.date | None = None) -> dict:
    """Findings for `packages` ([{name, version}]); status "pass" or "fail", by the rules the module names."""
    today = today or dt.date.today()
    index = _by_package(records)
    findings, allowed, expired, by_rule, unreadable = [], [], [], [], []
    for pkg in packages:
        hits, raw = [], {}
        for record in index.get(normalize_name(pkg["name"]), []):
            reading = read(record, pkg["name"], pkg["version"])
            if reading is None:
                continue
            where = {"id": record["id"], "package": pkg["name"], "version": pkg["version"]}
            if reading.by_rule:
                by_rule.append({**where, "read": list(reading.by_rule)})
            if reading.unreadable:
                unreadable.append({**where, "raw": list(reading.unreadable)})
                raw[record["id"]] = list(reading.unreadable)
            if reading.affected:
                hits.append(record)
        for group in _group(hits):
            finding = _finding(group, pkg, raw)
            ids = {finding["id"], *finding["aliases"]}
            entry = next((a for a in allowlist if a.covers(ids, pkg["name"], pkg["version"])), None)
            if entry and entry.expires >= today:
                allowed.append(
                    {**finding, "reason": entry.reason, "expires": entry.expires.isoformat(), "affects": entry.affects}
                )
            else:
                if entry:
                    expired.append({"id": entry.id, "package": entry.package, "expired": entry.expires.isoformat()})
                findings.append(finding)
    failing = [f for f in findings if f["severity"] in FAILING_SEVERITIES]
    return {
        "status": "fail" if failing else "pass",
        "accepted": [_label(f) for f in allowed],
        "records": len(records),
        "packages": len(packages),
        "findings": findings,
        "failing": [_label(f) for f in failing],
        "allowed": allowed,
        "expired_allowlist": expired,
        "read_by_rule": by_rule,
        "read_by_rule_records": len({r["id"] for r in by_rule}),
        "unreadable": unreadable,
        "unreadable_records": len({r["id"] for r in unreadable}),
    }


def word(result: dict) -> str:
    """What the audit says in one word: fail, stale (passed on data past its age), or pass."""
    if result["status"] == "fail":
        return "fail"
    return "stale" if result.get("stale") else "pass"


_ORDER = ["CRITICAL", "HIGH", "UNKNOWN", "MEDIUM", "LOW", "NONE"]


def carried(variant, records: list[dict], allowlist: list[Allowed], today: dt.date | None = None) -> list[dict]:
    """Every known advisory the line carries (the same audit the build gate runs, over its whole lock; a line
    without a committed lock, e.g. one that needs PyTorch's index: over its torch, torchvision, torchaudio and
    [packages] pins only), each marked accepted or not; the line's own pins first (torch, torchvision,
    torchaudio), then by package, worst first."""
    locked = locked_packages(variant)
    packages = [{"name": n, "version": v} for n, v in (variant.pins() if locked is None else locked)]
    result = audit(packages, records, allowlist, today)
    rows = [{**f, "accepted": True} for f in result["allowed"]] + [{**f, "accepted": False} for f in result["findings"]]
    first = [normalize_name(name) for name, _ in variant.pins()]
    rank = {name: i for i, name in enumerate(first)}

    def key(row: dict):
        name = normalize_name(row["package"])
        return (rank.get(name, len(rank)), name, _ORDER.index(row["severity"]), row["id"])

    return sorted(rows, key=key)


def carried_summary(rows: list[dict]) -> str:
    """'none known', or '1 critical, 8 high, 1 low (high and critical accepted)', or
    '2 high, 1 medium (1 not accepted: the build fails)'."""
    if not rows:
        return "none known"
    counts = {level: sum(r["severity"] == level for r in rows) for level in _ORDER}
    text = ", ".join(f"{n} {level.lower()}" for level, n in counts.items() if n)
    failing = [r for r in rows if r["severity"] in FAILING_SEVERITIES]
    open_ = sum(not r["accepted"] for r in failing)
    if open_:
        return text + f" ({open_} not accepted: the build fails)"
    return text + (" (high and critical accepted)" if failing else "")


# --------------------------------------------------------------------------- what each line carries (specs, `list`)

WHOLE_LOCK = "the whole lock"  # the spec's "audited" where the line's committed lock was audited
_KEPT = ("id", "aliases", "package", "version", "severity", "accepted", "affects", "fixed", "expires", "unreadable", "summary")


def disclosures(variants: list) -> dict[str, dict]:
    """carried() of each line as render writes it into its spec and `build.py list` shows it, by the committed
    snapshot and allowlist, read once."""
    database, allowlist = load_snapshot(), load_allowlist()
    sections = {}
    for variant in variants:
        # Accepted means "an allowlist entry covers it"; its expiry is shown, not applied here,
        # so the rendered file does not change with the date (the build's audit applies it).
        rows = carried(variant, database.records, allowlist, today=dt.date.min)
        sections[variant.name] = {
            "audited": WHOLE_LOCK if locked_packages(variant) is not None else "the pins only (no committed lock)",
            "database": database.source,
            "as_of": database.as_of.isoformat() if database.as_of else None,
            "summary": carried_summary(rows),
            "carried": [{k: row.get(k) for k in _KEPT} for row in rows],
        }
    return sections
