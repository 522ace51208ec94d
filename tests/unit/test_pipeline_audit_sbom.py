"""The offline vulnerability audit (OSV records) and the CycloneDX SBOM builder."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from pipeline.errors import UsageError
from pipeline.validation.audit import Allowed, audit, cvss3_base_score, load_allowlist, matches, severity
from pipeline.validation.sbom import build_sbom

pytestmark = pytest.mark.unit


def _record(id_, name, events=None, versions=None, level="HIGH"):
    affected = {"package": {"ecosystem": "PyPI", "name": name}}
    if events is not None:
        affected["ranges"] = [{"type": "ECOSYSTEM", "events": events}]
    if versions is not None:
        affected["versions"] = versions
    return {
        "id": id_,
        "aliases": [f"CVE-{id_}"],
        "summary": "s",
        "affected": [affected],
        "database_specific": {"severity": level},
    }


@pytest.mark.parametrize(
    ("version", "hit"),
    [("1.0.0", False), ("2.0.0", True), ("2.4.7", True), ("3.0.0", False), ("3.1", False)],
)
def test_range_introduced_fixed(version, hit):
    rec = _record("A", "Some_Pkg", events=[{"introduced": "2.0"}, {"fixed": "3.0"}])
    assert matches(rec, "some-pkg", version) is hit


def test_range_from_zero_and_last_affected():
    rec = _record("B", "tqdm", events=[{"introduced": "0"}, {"last_affected": "4.66.0"}])
    assert matches(rec, "tqdm", "4.66.0") and not matches(rec, "tqdm", "4.66.1")


def test_explicit_versions_and_other_packages():
    rec = _record("C", "jinja2", versions=["3.1.2"])
    assert matches(rec, "Jinja2", "3.1.2")
    assert not matches(rec, "jinja2", "3.1.3")
    assert not matches(rec, "markupsafe", "3.1.2")


PKGS = [{"name": "tqdm", "version": "4.99.2"}, {"name": "jinja2", "version": "3.1.6"}]


def test_high_finding_fails():
    result = audit(PKGS, [_record("GHSA-1", "tqdm", versions=["4.99.2"])], [])
    assert result["status"] == "fail" and result["failing"] == ["GHSA-1 (HIGH) in tqdm 4.99.2"]


def test_moderate_finding_is_reported_not_failed():
    result = audit(PKGS, [_record("GHSA-2", "jinja2", versions=["3.1.6"], level="MODERATE")], [])
    assert result["status"] == "pass" and result["findings"][0]["severity"] == "MEDIUM"


def test_allowlisted_by_alias_until_it_expires():
    rec = _record("GHSA-1", "tqdm", versions=["4.99.2"])
    entry = Allowed(id="CVE-GHSA-1", package="tqdm", reason="not reachable", expires=dt.date(2030, 1, 1))
    ok = audit(PKGS, [rec], [entry], today=dt.date(2029, 12, 31))
    assert ok["status"] == "pass" and ok["allowed"][0]["reason"] == "not reachable"
    late = audit(PKGS, [rec], [entry], today=dt.date(2030, 1, 2))
    assert late["status"] == "fail" and late["expired_allowlist"][0]["id"] == "CVE-GHSA-1"


@pytest.mark.parametrize(
    ("vector", "score"),
    [
        ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", 9.8),
        ("CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N", 6.1),
        ("CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H", 7.8),
        ("CVSS:3.0/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:H", 7.5),
        ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H", 10.0),
        ("CVSS:3.1/AV:N/AC:L/PR:L/UI:N/S:C/C:L/I:L/A:N", 6.4),
        ("CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:H/I:N/A:N", 5.9),
        ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:N", 0.0),
    ],
)
def test_cvss3_base_scores_match_published_scores(vector, score):
    assert cvss3_base_score(vector) == score


def test_severity_prefers_the_database_level_then_cvss_then_unknown():
    vector = [{"type": "CVSS_V3", "score": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"}]
    assert severity({"database_specific": {"severity": "MODERATE"}, "severity": vector}) == "MEDIUM"
    assert severity({"severity": vector}) == "CRITICAL"
    assert severity({"severity": [{"type": "CVSS_V4", "score": "CVSS:4.0/AV:N"}]}) == "UNKNOWN"
    assert severity({}) == "UNKNOWN"


def test_unknown_severity_fails_but_an_alias_with_a_known_level_decides():
    pysec = _record("PYSEC-1", "tqdm", versions=["4.99.2"], level="")
    pysec["aliases"] = ["GHSA-1"]
    assert audit(PKGS, [pysec], [])["status"] == "fail"
    ghsa = _record("GHSA-1", "tqdm", versions=["4.99.2"], level="LOW")
    result = audit(PKGS, [pysec, ghsa], [])
    assert result["status"] == "pass"
    assert [(f["id"], f["severity"]) for f in result["findings"]] == [("PYSEC-1", "LOW")]
    assert "GHSA-1" in result["findings"][0]["aliases"]


def test_withdrawn_records_are_ignored():
    rec = _record("W", "tqdm", versions=["4.99.2"])
    rec["withdrawn"] = "2024-01-01T00:00:00Z"
    assert audit(PKGS, [rec], [])["findings"] == []


def test_allowlist_needs_reason_and_expiry(tmp_path):
    bad = tmp_path / "allow.toml"
    bad.write_text('[[allow]]\nid = "X"\npackage = "tqdm"\n')
    with pytest.raises(UsageError, match="reason"):
        load_allowlist(bad)


def test_committed_allowlist_parses():
    assert all(entry.reason and entry.expires for entry in load_allowlist())


def test_sbom_is_cyclonedx_with_purls():
    inventory = {
        "python": [{"name": "torch", "version": "1.2.3", "license": ""}],
        "debian": [{"name": "openssh-server", "version": "1:9.2p1-2", "arch": "amd64"}],
    }
    doc = json.loads(build_sbom(inventory, "proven-torch cu999", "sha256:abc", "bookworm"))
    assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.6"
    purls = {c["purl"] for c in doc["components"]}
    assert "pkg:pypi/torch@1.2.3" in purls
    assert any(p.startswith("pkg:deb/debian/openssh-server@1:9.2p1-2") for p in purls)
    assert doc["metadata"]["component"]["type"] == "container"


# --- what each line carries -----------------------------------------------------------


def _carried(name):
    from pipeline.validation import advisories
    from pipeline.validation.audit import carried
    from pipeline.variants import load_matrix

    return carried(load_matrix().by_name(name), advisories.load_snapshot().records, load_allowlist())


def test_the_2_9_line_carries_its_two_high_advisories_accepted_with_reasons():
    rows = _carried("2.9-cu128")
    assert [(r["id"], r["severity"], r["accepted"]) for r in rows] == [
        ("PYSEC-2026-139", "HIGH", True),
        ("PYSEC-2026-2286", "HIGH", True),
    ]
    assert all(r["reason"] and r["fixed"] and "untrusted" in r["affects"] for r in rows)


def test_the_2_11_line_carries_no_known_high_advisory():
    assert _carried("2.11-cu130") == []


def test_the_cu121_line_carries_a_critical_one_and_says_so():
    rows = _carried("2.5-cu121")
    critical = [r for r in rows if r["severity"] == "CRITICAL"]
    assert [r["id"] for r in critical] == ["PYSEC-2025-41"] and critical[0]["accepted"]
    assert "CRITICAL" in critical[0]["reason"] and "NEVER load a checkpoint" in critical[0]["affects"]


def test_every_allowlist_entry_is_complete_and_at_most_six_months_long():
    for entry in load_allowlist():
        assert entry.versions and entry.affects and entry.fixed and entry.reason, entry.id
        assert (entry.expires - dt.date.today()).days <= 184


def test_an_allowlist_entry_longer_than_six_months_is_refused(tmp_path):
    path = tmp_path / "allow.toml"
    path.write_text('[[allow]]\nid = "X"\npackage = "torch"\nreason = "r"\nexpires = 2027-07-01\n')
    with pytest.raises(UsageError, match="more than six months away"):
        load_allowlist(path, today=dt.date(2026, 12, 3))
    assert load_allowlist(path, today=dt.date(2027, 1, 15))[0].id == "X"


def test_an_entry_for_other_versions_does_not_cover_this_one():
    record = {"id": "GHSA-1", "affected": [{"package": {"ecosystem": "PyPI", "name": "torch"}, "versions": ["3.4.1"]}],
              "database_specific": {"severity": "HIGH"}}  # fmt: skip
    entry = Allowed(id="GHSA-1", package="torch", reason="r", expires=dt.date(2030, 1, 1), versions=("3.3.2",))
    assert audit([{"name": "torch", "version": "3.4.1"}], [record], [entry])["status"] == "fail"
