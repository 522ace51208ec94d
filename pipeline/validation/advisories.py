"""The advisory database the audit reads: OSV records for PyPI, offline: the committed snapshot
(images/advisories/), or what `--advisories` names (docs/supply-chain.md, "Vulnerability audit")."""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

from common.rules import STALE_AFTER_DAYS
from pipeline.errors import UsageError
from pipeline.variants import REPO_ROOT

SNAPSHOT_DIR = REPO_ROOT / "images" / "advisories"
SNAPSHOT_DATA = "osv-pypi.jsonl.gz"
SNAPSHOT_META = "snapshot.json"


@dataclass(frozen=True)
class Database:
    records: list[dict]
    source: str
    as_of: dt.date | None  # None: a folder or zip that does not say

    def describe(self, today: dt.date | None = None) -> dict:
        age = None if self.as_of is None else ((today or dt.date.today()) - self.as_of).days
        return {
            "database": self.source,
            "as_of": self.as_of.isoformat() if self.as_of else None,
            "age_days": age,
            "stale": age is None or age > STALE_AFTER_DAYS,
        }


def _parse(path: Path, text: bytes) -> dict | None:
    if path.suffix in (".yaml", ".yml"):
        import yaml  # only the snapshot writer reads YAML (pypa/advisory-database's format)

        record = yaml.safe_load(text)
    else:
        try:
            record = json.loads(text)
        except ValueError:
            return None
    return record if isinstance(record, dict) and record.get("id") else None


def _read_folder(folder: Path) -> list[dict]:
    records = []
    for path in sorted(folder.rglob("*")):
        if path.suffix in (".json", ".yaml", ".yml") and path.is_file() and ".git" not in path.relative_to(folder).parts:
            record = _parse(path, path.read_bytes())
            if record is not None:
                records.append(record)
    return records


def _read_jsonl_gz(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load(source: Path) -> Database:
    """Records from the committed snapshot, a folder of OSV .json/.yaml files, a zip of them, or a .jsonl.gz."""
    if not source.exists():
        raise UsageError(f"--advisories {source}: no such folder or file; pass OSV records for PyPI (osv.dev PyPI/all.zip)")
    if source.is_dir() and (source / SNAPSHOT_META).exists():
        return load_snapshot(source)
    if source.is_dir():
        return Database(_read_folder(source), str(source), None)
    if zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as zf:
            records = [r for n in zf.namelist() if n.endswith(".json") and (r := _parse(Path(n), zf.read(n)))]
        return Database(records, str(source), None)
    if source.name.endswith(".jsonl.gz"):
        return Database(_read_jsonl_gz(source), str(source), None)
    raise UsageError(f"--advisories {source}: not a folder, zip or .jsonl.gz of OSV records")


def load_snapshot(folder: Path = SNAPSHOT_DIR) -> Database:
    """The committed snapshot, checked against the sha256 and count its snapshot.json records."""
    meta_path, data_path = folder / SNAPSHOT_META, folder / SNAPSHOT_DATA
    try:
        meta = json.loads(meta_path.read_text())
        data = data_path.read_bytes()
    except (OSError, ValueError) as err:
        raise UsageError(
            f"{folder}: advisory snapshot unreadable ({err}); rerun `python build.py advisories --from DIR`"
        ) from None
    if hashlib.sha256(data).hexdigest() != meta.get("sha256"):
        raise UsageError(
            f"{data_path}: sha256 differs from {meta_path.name}; rerun `python build.py advisories --from DIR` and commit both"
        )
    records = _read_jsonl_gz(data_path)
    if len(records) != meta.get("records"):
        raise UsageError(f"{data_path}: {len(records)} records, {meta_path.name} says {meta.get('records')}")
    source = f"{meta['source']}@{meta['revision'][:12]}" if meta.get("revision") else meta["source"]
    return Database(records, source, dt.date.fromisoformat(meta["as_of"]))


def _git_facts(folder: Path) -> tuple[str, str] | None:
    """(commit, commit date) when the folder is a git checkout."""
    from pipeline.hostprocs import run_host

    ran = run_host(["git", "-C", str(folder), "log", "-1", "--format=%H %cs"], "git")
    if ran.returncode != 0:
        return None
    out = ran.stdout.split()
    return (out[0], out[1]) if len(out) == 2 else None


def write_snapshot(source_path: Path, source: str, as_of: str | None = None, out: Path = SNAPSHOT_DIR) -> tuple[Path, Path]:
    """Write osv-pypi.jsonl.gz (PyPI records sorted by id, gzip without a timestamp) and snapshot.json
    from any form `--advisories` reads: a folder of OSV records (a git checkout gives its revision
    and date), OSV's PyPI all.zip, or a .jsonl.gz."""
    if not source_path.exists():
        raise UsageError(
            f"advisories --from {source_path}: no such folder or file; pass a checkout of pypa/advisory-database, "
            "a folder of OSV records, osv.dev's PyPI/all.zip or a .jsonl.gz"
        )
    git = _git_facts(source_path) if source_path.is_dir() else None
    revision = git[0] if git else None
    as_of = as_of or (git[1] if git else None)
    if as_of is None:
        raise UsageError(
            f"advisories --from {source_path}: not a git checkout, so pass --as-of YYYY-MM-DD (the date of the records)"
        )
    try:
        dt.date.fromisoformat(as_of)
    except ValueError:
        raise UsageError(f"--as-of {as_of}: not a date; use YYYY-MM-DD") from None
    records = [
        r
        for r in load(source_path).records
        if any(a.get("package", {}).get("ecosystem") == "PyPI" for a in r.get("affected", []))
    ]
    if not records:
        raise UsageError(f"advisories --from {source_path}: no OSV records for PyPI found (.json or .yaml records with an id)")
    records.sort(key=lambda r: r["id"])
    lines = "".join(json.dumps(r, sort_keys=True, separators=(",", ":"), default=str) + "\n" for r in records)
    data = gzip.compress(lines.encode(), compresslevel=9, mtime=0)
    out.mkdir(parents=True, exist_ok=True)
    data_path, meta_path = out / SNAPSHOT_DATA, out / SNAPSHOT_META
    data_path.write_bytes(data)
    meta = {
        "source": source,
        "revision": revision,
        "as_of": as_of,
        "records": len(records),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    return data_path, meta_path


def refresh_snapshot(from_dir: Path | None, source: str, as_of: str | None) -> list[str]:
    """`build.py advisories --from DIR|ZIP`: rewrite the committed snapshot; the lines to print (the files
    written, then what the snapshot now holds, read back)."""
    if from_dir is None:
        raise UsageError(
            "advisories needs --from DIR|ZIP: a checkout of pypa/advisory-database, a folder of OSV records or osv.dev's PyPI/all.zip"
        )
    written = [f"wrote {path.relative_to(REPO_ROOT)}" for path in write_snapshot(from_dir, source, as_of)]
    database = load_snapshot()
    return [*written, f"{len(database.records)} records from {database.source}, as of {database.as_of}"]
