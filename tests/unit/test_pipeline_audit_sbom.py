"""The offline vulnerability audit (OSV records) and the CycloneDX SBOM builder."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from pipeline.errors import UsageError
from pipeline.validation.audit import Allowed, audit, load_allowlist, read, severity, stated_fix, vector_rating
from pipeline.validation.sbom import build_sbom

pytestmark = pytest.mark.unit


def matches(record, name, version):
    """Whether the audit reads `record` as affecting package `name` at `version`."""
    reading = read(record, name, version)
    return bool(reading and reading.affected)


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


# --- irregular version forms: read by the documented rule, or counted as affected ----------


def _torch_record(id_, *ends, level=None):
    rec = _record(id_, "torch", events=[{"introduced": "0"}, *ends], level=level or "")
    if level is None:
        del rec["database_specific"]
    return rec


@pytest.mark.parametrize(
    ("end", "version", "hit"),
    [
        ({"last_affected": "2.6.0-cu124"}, "2.5.9", True),  # PYSEC-2025-189, -190
        ({"last_affected": "2.6.0-cu124"}, "2.6.0", True),
        ({"last_affected": "2.6.0-cu124"}, "2.7.3", False),
        ({"last_affected": "2.6.0-NA"}, "2.5.9", True),  # PYSEC-2025-192 ... -197
        ({"last_affected": "2.6.0-NA"}, "2.9.9", False),
        ({"fixed": "2.6.0-cu124"}, "2.6.0", True),  # a tagged fix: the release itself still counts as affected
        ({"fixed": "2.6.0-cu124"}, "2.6.1", False),
    ],
)
def test_a_release_with_a_tag_is_read_as_the_release_and_said_so(end, version, hit):
    reading = read(_torch_record("PYSEC-X", end), "torch", version)
    assert reading.affected is hit and not reading.unreadable
    raw = next(iter(end.values()))
    assert len(reading.by_rule) == 1 and raw in reading.by_rule[0] and "read as" in reading.by_rule[0]


def test_several_ends_after_one_start_close_at_the_latest():
    """PYSEC-2025-210's shape: two tagged last_affected ends after one introduced; the later one closes."""
    rec = _torch_record("PYSEC-2025-210", {"last_affected": "2.5.0-NA"}, {"last_affected": "2.7.3-NA"})
    assert read(rec, "torch", "2.7.3").affected and read(rec, "torch", "2.5.9").affected
    assert not read(rec, "torch", "2.9.9").affected
    assert any("several ends" in text for text in read(rec, "torch", "2.7.3").by_rule)


@pytest.mark.parametrize("garbage", ["2019-09-12", "7.2.0-12.1", "not a version", "2018-04-22b"])
def test_an_unreadable_end_counts_as_affected_and_is_reported_with_the_record_and_its_text(garbage):
    rec = _torch_record("PYSEC-BAD", {"fixed": garbage}, level="MODERATE")
    reading = read(rec, "torch", "99.0")
    assert reading.affected and reading.unreadable == (f"fixed: {garbage}",)
    result = audit([{"name": "torch", "version": "99.0"}], [rec], [])
    assert result["unreadable_records"] == 1 and result["unreadable"][0]["raw"] == [f"fixed: {garbage}"]
    assert result["findings"][0]["unreadable"] == [f"PYSEC-BAD: fixed: {garbage}"]
    assert result["status"] == "pass" and result["findings"][0]["severity"] == "MEDIUM"  # its own severity decides
    high = _torch_record("PYSEC-BAD", {"fixed": garbage}, level="HIGH")
    assert audit([{"name": "torch", "version": "99.0"}], [high], [])["status"] == "fail"


def test_the_audit_counts_the_records_read_by_rule_even_where_they_do_not_match():
    recs = [_torch_record("PYSEC-A", {"last_affected": "2.6.0-NA"}), _torch_record("PYSEC-B", {"fixed": "2.0"})]
    result = audit([{"name": "torch", "version": "2.9.9"}], recs, [])
    assert result["findings"] == [] and result["read_by_rule_records"] == 1 and result["unreadable_records"] == 0
    assert result["read_by_rule"][0]["id"] == "PYSEC-A"


# --- severity from the database's level and every CVSS vector (the `cvss` library) ------


@pytest.mark.parametrize(
    ("kind", "vector", "level"),
    [
        ("CVSS_V3", "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", "CRITICAL"),  # 9.8
        ("CVSS_V3", "CVSS:3.1/AV:N/AC:H/PR:N/UI:R/S:U/C:H/I:H/A:H", "HIGH"),  # 7.5, PYSEC-2025-189
        ("CVSS_V3", "CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N", "MEDIUM"),  # 6.1
        ("CVSS_V3", "CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:N/I:N/A:L", "LOW"),  # 3.3, PYSEC-2025-210
        ("CVSS_V3", "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:N", "NONE"),  # 0.0
        ("CVSS_V4", "CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N", "CRITICAL"),  # 9.3
        ("CVSS_V4", "CVSS:4.0/AV:L/AC:L/AT:N/PR:L/UI:N/VC:L/VI:L/VA:L/SC:N/SI:N/SA:N", "MEDIUM"),  # PYSEC-2025-192's
        ("CVSS_V2", "AV:N/AC:L/Au:N/C:P/I:P/A:P", "HIGH"),  # 7.5
        ("CVSS_V4", "CVSS:4.0/AV:N", None),  # incomplete: no rating
        ("CVSS_V9", "CVSS:9.0/AV:N", None),
    ],
)
def test_vectors_are_rated_by_the_library(kind, vector, level):
    assert vector_rating(kind, vector) == level


def test_a_cvss_v4_only_record_is_rated_from_its_vector():
    v4 = "CVSS:4.0/AV:L/AC:L/AT:N/PR:L/UI:N/VC:L/VI:L/VA:L/SC:N/SI:N/SA:N/E:X/CR:X/IR:X/AR:X"
    assert severity({"severity": [{"type": "CVSS_V4", "score": v4}]}) == "MEDIUM"


def test_severity_takes_the_highest_level_any_vector_or_the_database_states():
    critical = {"type": "CVSS_V3", "score": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"}
    low = {"type": "CVSS_V4", "score": "CVSS:4.0/AV:L/AC:H/AT:N/PR:L/UI:N/VC:N/VI:L/VA:N/SC:N/SI:N/SA:N"}
    assert severity({"database_specific": {"severity": "MODERATE"}, "severity": [critical]}) == "CRITICAL"
    assert severity({"database_specific": {"severity": "HIGH"}, "severity": [low]}) == "HIGH"
    assert severity({"severity": [low, critical]}) == "CRITICAL"
    assert severity({"database_specific": {"severity": "MODERATE"}}) == "MEDIUM"
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


def test_the_2_11_line_carries_no_high_advisory_but_its_whole_lock_shows_a_medium_one():
    """setuptools is not a pin of the line; only the whole-lock audit sees it."""
    rows = _carried("2.11-cu130")
    assert not [r for r in rows if r["severity"] in ("HIGH", "CRITICAL", "UNKNOWN")]
    setuptools = [r for r in rows if r["package"] == "setuptools"]
    assert setuptools and setuptools[0]["severity"] == "MEDIUM" and setuptools[0]["fixed"] != "no fix stated"


def test_the_cu121_line_carries_a_critical_one_and_says_so():
    rows = _carried("2.5-cu121")
    critical = [r for r in rows if r["severity"] == "CRITICAL"]
    assert [r["id"] for r in critical] == ["PYSEC-2025-41"] and critical[0]["accepted"]
    assert "CRITICAL" in critical[0]["reason"] and "NEVER load a checkpoint" in critical[0]["affects"]


def test_the_cu121_disclosure_names_the_high_advisory_written_with_a_tagged_release():
    """PYSEC-2025-189 says last_affected 2.6.0-cu124: once dropped unseen, now HIGH (CVSS 3.1 7.5) and shown."""
    from common.rules import carried_text
    from pipeline.validation import audit
    from pipeline.variants import load_matrix

    line = load_matrix().by_name("2.5-cu121")
    section = audit.disclosures([line])[line.name]
    row = next(r for r in section["carried"] if r["id"] == "PYSEC-2025-189")
    assert row["severity"] == "HIGH" and row["package"] == "torch" and row["fixed"] == "no fix stated"
    assert "PYSEC-2025-189" in carried_text(section)
    assert {r["severity"] for r in section["carried"]} >= {"CRITICAL", "HIGH", "MEDIUM", "LOW"}  # every severity listed


def test_the_disclosure_of_every_locked_line_is_the_gates_audit_of_its_whole_lock():
    """The committed spec (what build.py list, the README and proof show) equals an audit of every locked package."""
    from pipeline.lock import locked_packages
    from pipeline.render import spec_path
    from pipeline.validation import advisories
    from pipeline.variants import load_matrix

    records, allow = advisories.load_snapshot().records, load_allowlist()
    locked = [v for v in load_matrix().every_variant() if locked_packages(v) is not None]
    assert {v.name for v in locked} >= {"2.9-cu128", "2.11-cu130", "2.9-cu128-rlhf"}
    for variant in locked:
        packages = [{"name": n, "version": v} for n, v in locked_packages(variant)]
        gate = audit(packages, records, allow, today=dt.date.min)
        spec = json.loads(spec_path(variant).read_text())["advisories"]
        assert spec["audited"] == "the whole lock"
        assert sorted((r["id"], r["package"]) for r in spec["carried"]) == sorted(
            (f["id"], f["package"]) for f in gate["findings"] + gate["allowed"]
        ), variant.name
        assert sum(r["package"] == "torch" for r in spec["carried"][:2]) == min(
            2, sum(r["package"] == "torch" for r in spec["carried"])
        )


def test_every_allowlist_entry_is_complete_and_at_most_six_months_long():
    for entry in load_allowlist():
        assert entry.versions and entry.affects and entry.fixed and entry.reason, entry.id
        assert (entry.expires - dt.date.today()).days <= 184


def test_every_allowlist_entry_claims_only_the_fix_its_records_state():
    """`fixed` is the first fixed release after each listed version that a record of the advisory's
    group names, or "no fix stated"; every entry still matches a record of the snapshot."""
    from pipeline.validation import advisories
    from pipeline.validation.audit import _group

    records = advisories.load_snapshot().records
    for entry in load_allowlist():
        for version in entry.versions:
            hits = [r for r in records if matches(r, entry.package, version)]
            group = next((g for g in _group(hits) if entry.id in {i for r in g for i in (r["id"], *r.get("aliases", []))}), None)
            assert group, f"{entry.id} does not match {entry.package} {version} in the snapshot"
            assert entry.fixed == stated_fix(group, entry.package, version), (entry.id, version)


def test_a_claimed_fix_no_record_states_is_caught():
    rec = _torch_record("PYSEC-L", {"last_affected": "2.10.0"})
    assert stated_fix([rec], "torch", "2.9.9") == "no fix stated"
    fixed = _torch_record("PYSEC-F", {"fixed": "2.10.0"})
    assert stated_fix([fixed], "torch", "2.9.9") == "2.10.0"


def test_an_allowlist_entry_longer_than_six_months_is_refused(tmp_path):
    path = tmp_path / "allow.toml"
    path.write_text('[[allow]]\nid = "X"\npackage = "torch"\nreason = "r"\nexpires = 2027-07-01\n')
    with pytest.raises(UsageError, match="more than six months away"):
        load_allowlist(path, today=dt.date(2026, 12, 3))
    assert load_allowlist(path, today=dt.date(2027, 1, 15))[0].id == "X"


def test_an_entry_for_other_versions_does_not_cover_this_one():
    record = {
        "id": "GHSA-1",
        "affected": [{"package": {"ecosystem": "PyPI", "name": "torch"}, "versions": ["3.4.1"]}],
        "database_specific": {"severity": "HIGH"},
    }
    entry = Allowed(id="GHSA-1", package="torch", reason="r", expires=dt.date(2030, 1, 1), versions=("3.3.2",))
    assert audit([{"name": "torch", "version": "3.4.1"}], [record], [entry])["status"] == "fail"
