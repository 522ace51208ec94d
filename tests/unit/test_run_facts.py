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
from pipeline.variants import load_matrix, resolve

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


def test_git_commit_is_the_full_commit_marked_dirty_by_tracked_changes(monkeypatch, tmp_path):
    """A checkout of its own, so each answer is reached: clean, a tracked file changed (an untracked one is
    not a change), and a folder that is no git checkout."""
    import pipeline.line

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True, text=True, check=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "tracked").write_text("one\n")
    git("add", "tracked")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "one")
    monkeypatch.setattr(pipeline.line, "REPO_ROOT", tmp_path)
    head = git("rev-parse", "HEAD")
    (tmp_path / "untracked").write_text("not a change\n")
    assert re.fullmatch(r"[0-9a-f]{40}", head) and git_commit() == head
    (tmp_path / "tracked").write_text("two\n")
    assert git_commit() == f"{head}-dirty"
    monkeypatch.setattr(pipeline.line, "REPO_ROOT", tmp_path / "nowhere")
    assert git_commit() == "nogit"


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
