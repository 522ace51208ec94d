"""The example output the README and the docs quote (pipeline/examples.py) is a real run's: each committed
log says what the code prints from the record committed beside it, and the docs hold exactly the log's
lines (`build.py render --check` would fail otherwise; here too, with a changed log)."""

from __future__ import annotations

import json
import shutil

import pytest

from pipeline import diff, examples
from pipeline.variants import REPO_ROOT
from ppo_bench import bench
from smoke import proof

pytestmark = pytest.mark.unit

PROOF_DIR = REPO_ROOT / examples.EXAMPLES_DIR / "proof-cpu"
BENCH_DIR = REPO_ROOT / examples.EXAMPLES_DIR / "bench-atari-cpu"


def test_the_proof_example_is_what_proof_prints_from_its_record():
    record = json.loads((PROOF_DIR / "proof.json").read_text())
    lines = examples.EXAMPLES["proof-cpu"].lines()
    assert lines == [proof.comparison_line(record["release_comparison"]), record["verdict"]]
    assert record["ok"] is True and record["verdict"] == proof.verdict_line(True, record["where"], [])


def test_the_bench_example_is_what_proof_bench_prints_from_its_result():
    result = json.loads((BENCH_DIR / "result.json").read_text())
    # proof names the host's CPU itself (this ppo_bench's result.json did not record it): the proof
    # example's, the same machine on the same day (both folders' README say so)
    result.setdefault("cpu", json.loads((PROOF_DIR / "proof.json").read_text())["where"]["cpu"])
    (line,) = examples.EXAMPLES["bench-atari-cpu"].lines()
    kind = str(result["device"]).split(":")[0]
    release = json.loads((BENCH_DIR / "release_figures.json").read_text())[result["env_id"]].get(kind)
    assert line == bench.bench_line("atari", result, release)


def test_the_diff_example_is_what_diff_prints_from_its_record():
    record = json.loads((REPO_ROOT / examples.EXAMPLES_DIR / "diff-lines" / "diff.json").read_text())
    printed = [line for line in diff.screen(record) if line.startswith(examples.EXAMPLES["diff-lines"].starts)]
    assert examples.EXAMPLES["diff-lines"].lines() == printed
    assert record["a"]["verified"] and record["b"]["verified"]


def test_each_example_folder_says_where_and_when_it_ran():
    for example in examples.EXAMPLES.values():
        text = (REPO_ROOT / example.log.parent / "README.md").read_text()
        assert "ran on" in text and "2026-" in text, example.name


def test_every_document_holds_its_examples_as_rendered():
    for path, text in examples.rendered_docs().items():
        assert (REPO_ROOT / path).read_text() == text, f"{path}: run `python build.py render`"
    assert any("<!-- example: " in (REPO_ROOT / p).read_text() for p in examples.DOCS)


def test_a_changed_log_makes_the_document_stale(tmp_path):
    for path in examples.DOCS:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / path, tmp_path / path)
    for example in examples.EXAMPLES.values():
        (tmp_path / example.log).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / example.log, tmp_path / example.log)
    log = tmp_path / examples.EXAMPLES["proof-cpu"].log
    log.write_text(log.read_text().replace("proof: PROVEN", "proof: PROVEN (edited)"))
    rendered = examples.rendered_docs(tmp_path)
    assert any(rendered[p] != (tmp_path / p).read_text() for p in examples.DOCS)
