"""The advisory database: the committed snapshot, the snapshot writer and the other sources it reads."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import subprocess
import zipfile

import pytest

from pipeline.errors import UsageError
from pipeline.validation import advisories
from pipeline.validation.audit import audit, severity

pytestmark = pytest.mark.unit


def _osv(id_, name, ecosystem="PyPI"):
    return {"id": id_, "affected": [{"package": {"ecosystem": ecosystem, "name": name}, "versions": ["1.0"]}]}


@pytest.fixture
def records_dir(tmp_path):
    folder = tmp_path / "vulns"
    (folder / "b").mkdir(parents=True)
    (folder / "b" / "PYSEC-2.json").write_text(json.dumps(_osv("PYSEC-2", "b")))
    (folder / "a.yaml").write_text("id: PYSEC-1\naffected:\n- package: {ecosystem: PyPI, name: a}\n  versions: ['1.0']\n")
    (folder / "npm.json").write_text(json.dumps(_osv("GHSA-npm", "left-pad", ecosystem="npm")))
    return folder


def test_snapshot_is_the_same_bytes_for_the_same_records(records_dir, tmp_path):
    first = advisories.write_snapshot(records_dir, "test", "2026-11-30", out=tmp_path / "one")
    second = advisories.write_snapshot(records_dir, "test", "2026-11-30", out=tmp_path / "two")
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]
    db = advisories.load_snapshot(tmp_path / "one")
    assert [r["id"] for r in db.records] == ["PYSEC-1", "PYSEC-2"]  # PyPI only, sorted by id
    assert db.as_of == dt.date(2026, 11, 30) and db.source == "test"


def test_snapshot_of_a_git_checkout_records_its_revision_and_date(records_dir, tmp_path):
    git = ["git", "-C", str(records_dir), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run(
        [*git, "commit", "-qm", "records"],
        check=True,
        env={"GIT_COMMITTER_DATE": "2026-10-01T12:00:00Z", "PATH": "/usr/bin:/bin"},
    )
    _, meta_path = advisories.write_snapshot(records_dir, "https://example.org/db", out=tmp_path / "snap")
    meta = json.loads(meta_path.read_text())
    assert meta["as_of"] == "2026-10-01" and len(meta["revision"]) == 40 and meta["records"] == 2


def test_snapshot_of_a_plain_folder_needs_a_date(records_dir, tmp_path):
    with pytest.raises(UsageError, match="--as-of"):
        advisories.write_snapshot(records_dir, "test", out=tmp_path / "snap")
    with pytest.raises(UsageError, match="not a date"):
        advisories.write_snapshot(records_dir, "test", "last week", out=tmp_path / "snap")


def test_a_changed_snapshot_file_is_refused(records_dir, tmp_path):
    data_path, _ = advisories.write_snapshot(records_dir, "test", "2026-11-30", out=tmp_path / "snap")
    data_path.write_bytes(gzip.compress(b'{"id": "PYSEC-9"}\n', mtime=0))
    with pytest.raises(UsageError, match="sha256"):
        advisories.load_snapshot(tmp_path / "snap")


def test_records_load_from_folder_zip_and_jsonl(records_dir, tmp_path):
    with zipfile.ZipFile(tmp_path / "all.zip", "w") as zf:
        zf.writestr("Y.json", json.dumps(_osv("Y", "tqdm")))
    data_path, _ = advisories.write_snapshot(records_dir, "test", "2026-11-30", out=tmp_path / "snap")
    assert {r["id"] for r in advisories.load(records_dir).records} == {"PYSEC-1", "PYSEC-2", "GHSA-npm"}
    assert [r["id"] for r in advisories.load(tmp_path / "all.zip").records] == ["Y"]
    assert len(advisories.load(data_path).records) == 2
    assert advisories.load(tmp_path / "snap").as_of == dt.date(2026, 11, 30)
    assert advisories.load(tmp_path / "all.zip").describe()["stale"]  # no date: cannot say it is fresh
    with pytest.raises(UsageError, match="no such"):
        advisories.load(tmp_path / "missing")


def test_age_and_staleness():
    """Past 90 days the data is stale."""
    db = advisories.Database([], "x", dt.date(2026, 7, 23))
    assert db.describe(dt.date(2026, 10, 21)) == {"database": "x", "as_of": "2026-07-23", "age_days": 90, "stale": False}
    assert db.describe(dt.date(2026, 10, 22))["stale"] is True


def test_a_pass_on_stale_data_is_said_stale():
    from pipeline.validation.audit import word

    assert word({"status": "pass", "stale": True}) == "stale"
    assert word({"status": "pass", "stale": False}) == "pass"
    assert word({"status": "fail", "stale": True}) == "fail"


def test_the_committed_snapshot_is_the_2026_data():
    db = advisories.load_snapshot()
    assert db.as_of == dt.date(2026, 7, 23) and len(db.records) == 7080
    assert "advisory-database-pypa@57da901aadaf" in db.source


def test_committed_snapshot_is_real_advisory_data():
    """The snapshot loads (sha256 and count checked) and finds known vulnerabilities in old releases."""
    db = advisories.load_snapshot()
    assert len(db.records) > 1000 and db.as_of is not None
    old = [{"name": "Jinja2", "version": "2.11.2"}, {"name": "urllib3", "version": "1.26.4"}]
    found = audit(old, db.records, [])["findings"]
    assert any(f["id"] == "PYSEC-2021-66" or "CVE-2020-28493" in f["aliases"] for f in found)
    assert any(f["package"] == "urllib3" for f in found)
    assert (
        audit([{"name": "jinja2", "version": "2.11.3"}], [r for r in db.records if r["id"] == "PYSEC-2021-66"], [])["findings"]
        == []
    )
    assert {severity(r) for r in db.records} >= {"CRITICAL", "HIGH", "MEDIUM", "UNKNOWN"}


def test_a_snapshot_refreshed_from_osv_all_zip_makes_one_finding_of_a_pysec_and_a_ghsa_record(tmp_path):
    """`advisories --from` takes every form `--advisories` takes; two records of one vulnerability
    (PYSEC and GHSA, aliases of each other) become one finding that shows both IDs."""
    pysec = {**_osv("PYSEC-2099-1", "tqdm"), "aliases": ["GHSA-aaaa-bbbb-cccc", "CVE-2099-1"]}
    ghsa = {**_osv("GHSA-aaaa-bbbb-cccc", "tqdm"), "aliases": ["CVE-2099-1"], "database_specific": {"severity": "HIGH"}}
    with zipfile.ZipFile(tmp_path / "all.zip", "w") as zf:
        zf.writestr("PYSEC-2099-1.json", json.dumps(pysec))
        zf.writestr("GHSA-aaaa-bbbb-cccc.json", json.dumps(ghsa))
    with pytest.raises(UsageError, match="--as-of"):  # a zip says nothing of its date
        advisories.write_snapshot(tmp_path / "all.zip", "osv.dev", out=tmp_path / "snap")
    advisories.write_snapshot(tmp_path / "all.zip", "osv.dev PyPI/all.zip", "2026-12-01", out=tmp_path / "snap")
    db = advisories.load_snapshot(tmp_path / "snap")
    assert [r["id"] for r in db.records] == ["GHSA-aaaa-bbbb-cccc", "PYSEC-2099-1"]
    findings = audit([{"name": "tqdm", "version": "1.0"}], db.records, [])["findings"]
    assert len(findings) == 1 and findings[0]["severity"] == "HIGH"
    assert {findings[0]["id"], *findings[0]["aliases"]} >= {"PYSEC-2099-1", "GHSA-aaaa-bbbb-cccc"}


def test_advisories_from_a_missing_path_is_one_line_and_exit_2(tmp_path):
    import sys

    proc = subprocess.run(
        [sys.executable, "build.py", "advisories", "--from", str(tmp_path / "nope.zip")],
        capture_output=True,
        text=True,
        check=False,
        cwd=advisories.REPO_ROOT,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no such folder or file" in proc.stderr
