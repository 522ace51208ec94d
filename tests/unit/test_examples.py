"""The example output the README and the docs quote (pipeline/examples.py) is a real run's: each committed
log says what the code prints from the record committed beside it, and the docs hold exactly the log's
lines (`build.py render --check` would fail otherwise; here too, with a changed log)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from pipeline import diff, examples
from pipeline.errors import UsageError
from pipeline.variants import REPO_ROOT
from ppo_bench import bench
from smoke import proof

pytestmark = pytest.mark.unit

PROOF_DIR = REPO_ROOT / examples.EXAMPLES_DIR / "proof-cpu"
BENCH_DIR = REPO_ROOT / examples.EXAMPLES_DIR / "bench-atari-cpu"
REPORT = "docs/examples/report-2.9-cu128/report.json"  # the default image's build report the docs' figures read


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
    for name, example in examples.EXAMPLES.items():
        text = (REPO_ROOT / example.log.parent / "README.md").read_text()
        assert "ran on" in text and "2026-" in text, name


def test_every_document_holds_its_examples_and_figures_as_rendered():
    for path, text in examples.rendered_docs().items():
        assert (REPO_ROOT / path).read_text() == text, f"{path}: run `python build.py render`"
    committed = "".join((REPO_ROOT / p).read_text() for p in examples.DOCS)
    assert "<!-- example: " in committed and committed.count("<!-- figure: ") >= 10


def test_a_figure_is_its_records_field_formatted():
    record = json.loads((REPO_ROOT / REPORT).read_text())
    size = record["validation"]["size"]["uncompressed_bytes"]
    assert examples.figure(REPORT, "validation.size.uncompressed_bytes", "GB") == f"{size / 1e9:.2f} GB"
    layer = record["validation"]["size"]["largest_layers"][0]["bytes"]
    assert examples.figure(REPORT, "validation.size.largest_layers.0.bytes", "MB") == f"{layer / 1e6:,.0f} MB"
    assert examples.figure(REPORT, "validation.stages", "len") == str(len(record["validation"]["stages"]))


def _copy_docs(tmp_path):
    """The documents and every record their examples and figures read, under tmp_path."""
    for path in examples.DOCS:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / path, tmp_path / path)
    shutil.copytree(REPO_ROOT / "docs" / "examples", tmp_path / "docs" / "examples", dirs_exist_ok=True)
    shutil.copytree(REPO_ROOT / "docs" / "evidence", tmp_path / "docs" / "evidence", dirs_exist_ok=True)


def test_an_edited_figure_makes_the_document_stale(tmp_path):
    _copy_docs(tmp_path)
    readme = tmp_path / "README.md"
    figure = f"<!-- figure: {REPORT} validation.size.uncompressed_bytes GB -->"
    assert figure in readme.read_text()
    readme.write_text(re.sub(re.escape(figure) + r"[^<]*", figure + "7.00 GB", readme.read_text()))
    assert examples.rendered_docs(tmp_path)[Path("README.md")] != readme.read_text()
    assert examples.rendered_docs(tmp_path)[Path("README.md")] == (REPO_ROOT / "README.md").read_text()


def test_a_changed_record_makes_the_document_stale(tmp_path):
    _copy_docs(tmp_path)
    record = json.loads((tmp_path / REPORT).read_text())
    record["validation"]["seconds"] += 60
    (tmp_path / REPORT).write_text(json.dumps(record))
    rendered = examples.rendered_docs(tmp_path)
    assert rendered[Path("README.md")] != (tmp_path / "README.md").read_text()


@pytest.mark.parametrize(
    "marker, says",
    [
        ("docs/examples/none.json validation.seconds s", "docs/examples/none.json: cannot read"),
        (f"{REPORT} validation.no_such_field s", f"{REPORT}: no field 'validation.no_such_field'"),
        (f"{REPORT} validation.size.largest_layers.99.bytes GB", f"{REPORT}: no field 'validation.size.largest_layers.99"),
        (f"{REPORT} validation.seconds parsecs", "asks for format 'parsecs'"),
        (f"{REPORT} validation.verdict GB", "not a figure of format 'GB'"),
    ],
)
def test_a_figure_naming_a_missing_file_or_field_is_a_one_line_usage_error(marker, says):
    with pytest.raises(UsageError) as err:
        examples.rendered(f"took <!-- figure: {marker} -->25 s<!-- /figure -->.\n")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_changed_log_makes_the_document_stale(tmp_path):
    _copy_docs(tmp_path)
    log = tmp_path / examples.EXAMPLES["proof-cpu"].log
    log.write_text(log.read_text().replace("proof: PROVEN", "proof: PROVEN (edited)"))
    rendered = examples.rendered_docs(tmp_path)
    assert any(rendered[p] != (tmp_path / p).read_text() for p in examples.DOCS)


def test_each_figures_record_says_where_and_when_it_ran():
    committed = "".join((REPO_ROOT / p).read_text() for p in examples.DOCS)
    evidence = (REPO_ROOT / "docs" / "evidence" / "README.md").read_text()
    for file in set(re.findall(r"<!-- figure: (\S+) ", committed)):
        folder = (REPO_ROOT / file).parent
        if (folder / "README.md").exists():
            text = (folder / "README.md").read_text()
            assert "ran on" in text and "2026-" in text, file
        else:  # docs/evidence/<date>-…/: dated by its name, its machine said where the docs cite it
            assert folder.parent.name == "evidence" and re.match(r"2026-\d\d-\d\d-", folder.name), file
            assert f"{folder.name}/" in evidence + committed, file
