"""Each row `proof` prints says what it measured: every label is followed by its own value, read
from its own source (the facts), never by another item's value. Given facts with a distinct value
per item, so a value beside the wrong label cannot pass unnoticed."""

from __future__ import annotations

import pytest
import torch

from smoke import checks, cli, facts, rules
from smoke.expect import expect_from_facts
from tests.proof_rows import header_pairs, header_source, version_row_source, versions_row_pairs

pytestmark = pytest.mark.unit

# A CUDA image's facts, each item distinct from every other (and from the matrix's pins: none is written outside it).
GIVEN = {
    "torch": "3.7.2+cu128",
    "torch_release": "3.7.2",
    "torchvision": "0.41.3+cu128",
    "torchaudio": "3.6.4+cu128",
    "cuda": "12.8",
    "cudnn": 93105,
    "nccl": "2.27.3",
    "python": "3.11.7",
    "gpus": [],
    "driver": None,
    "shm_bytes": 2**30,
}


def test_the_versions_row_puts_each_value_beside_its_own_label():
    comparisons = rules.compare_versions(expect_from_facts(GIVEN), GIVEN)
    row = ", ".join(c.describe() for c in comparisons)
    assert versions_row_pairs(row) == version_row_source(GIVEN)
    assert "python 3.11 (" not in row  # the row that once read "python 3.11 (<cuDNN's version>)"


def test_the_versions_check_row_through_the_check_itself():
    """check_versions' pass detail, with the host's torch (its wheels, its cuDNN) and given pins and facts."""
    host = facts.collect(torch)
    given = {**host, **{k: v for k, v in GIVEN.items() if k in ("cudnn", "nccl", "cuda")}}
    ctx = checks.Context(expect=expect_from_facts(given), require_gpu=False, facts=given)
    outcome = checks.check_versions(ctx)
    assert outcome.status == "pass", outcome.detail
    assert versions_row_pairs(outcome.detail) == version_row_source(given)


def test_a_failed_pin_names_the_expected_and_found_value_of_that_item():
    found = {**GIVEN, "cudnn": 90700}
    [bad] = [c for c in rules.compare_versions(expect_from_facts(GIVEN), found) if not c.ok]
    assert bad.describe() == "cudnn: expected 9.31.5 (93105), found 9.7.0 (90700)"


def test_the_facts_header_puts_each_value_beside_its_own_label():
    line = cli.facts_lines({**GIVEN, "torchvision": "0.41.3", "torchaudio": "3.6.4"}, {"variant": "x"}, False)[1]
    assert (
        header_pairs(line)
        == header_source(GIVEN)
        == {
            "torch": "3.7.2+cu128",
            "CUDA": "12.8",
            "cuDNN": "9.31.5",
            "NCCL": "2.27.3",
            "Python": "3.11.7",
        }
    )
