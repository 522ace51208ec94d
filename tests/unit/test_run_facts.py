"""facts.json, what provenance says of a run (pipeline/run_facts.py): every fact gathered once travels
into the typed record and back out of the file, so a fact added to one side only fails here, not after a
whole build and push."""

from __future__ import annotations

import dataclasses
import re
import subprocess

import pytest

from pipeline.line import git_commit
from pipeline.records import FACTS, Facts
from pipeline.run_facts import RunFacts, write_facts
from pipeline.target import Target
from pipeline.variants import REPO_ROOT, load_matrix, resolve

pytestmark = pytest.mark.unit


def test_every_gathered_fact_is_written_and_read_back(tmp_path):
    matrix = load_matrix()
    variant = resolve(matrix, None)
    target = Target(variant, tmp_path, "127.0.0.1:5000/p", "20261206", "2026-12-06T00:00:00Z", "abc1234")
    facts = RunFacts(["python", "build.py"], "a" * 40, "2026-12-06T00:00:00Z", "run-1", {"docker_engine": "20.10"})
    deps = [{"uri": "docker-image://base", "digest": {"sha256": "0" * 64}}]
    written = write_facts(target, "sha256:" + "f" * 64, facts, deps, ["t1", "t2"])
    read = Facts.load(tmp_path / FACTS)
    assert read == written
    for field in dataclasses.fields(RunFacts):  # each gathered fact, as gathered
        value = getattr(facts, field.name)
        assert getattr(read, field.name) == (tuple(value) if isinstance(value, list) else value), field.name
    assert (read.line, read.platform, read.tags, read.stamped_image_id) == (
        variant.name,
        target.platform,
        ("t1", "t2"),
        "sha256:" + "f" * 64,
    )


def test_git_commit_is_the_full_commit_marked_dirty_by_tracked_changes():
    head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    changed = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    )
    commit = git_commit()
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", commit), commit
    assert commit == head.stdout.strip() + ("-dirty" if changed.stdout.strip() else "")


@pytest.mark.parametrize(
    ("commit", "named"),
    [("0123456789abcdef" * 2 + "01234567", "0123456"), ("abcdef0" + "1" * 33 + "-dirty", "abcdef0-dirty"), ("nogit", "nogit")],
)
def test_the_revision_an_immutable_tag_names_is_the_commits_first_seven_digits(commit, named):
    """What line.run puts in every immutable tag and `sign` checks facts.json's commit against (push.IMMUTABLE)."""
    from pipeline import push
    from pipeline.records import revision

    assert revision(commit) == named
    assert (push.IMMUTABLE.match(f"2.0.0-cu100-py3.0-20261206-{named}") is not None) == (named != "nogit")
