"""Resolving requests against the matrix, and the matrix's own checks."""

from __future__ import annotations

import re

import pytest

from pipeline.errors import MatrixError, UsageError
from pipeline.variants import MATRIX_PATH, load_matrix, resolve

pytestmark = pytest.mark.unit


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def test_every_requested_cuda_line_is_declared(matrix):
    assert {v.cuda for v in matrix.variants} == {"11.8", "12.1", "12.6", "12.8", "13.0", "13.2"}


def test_cuda_13_has_two_torch_lines_and_the_first_listed_is_the_choice(matrix):
    assert [v.name for v in matrix.variants if v.cuda == "13.0"] == ["2.11-cu130", "2.9-cu130"]
    assert resolve(matrix, "13.0").name == "2.11-cu130"
    assert resolve(matrix, "13.0", "2.9").name == "2.9-cu130"
    assert re.fullmatch(r"2\.11\.\d+", resolve(matrix, "13.0", "2.11").torch)


def test_torch_2_9_lines_are_exactly_the_published_ones(matrix):
    assert sorted(v.cuda for v in matrix.variants if v.torch.startswith("2.9.")) == ["12.6", "12.8", "13.0"]


def test_default_is_2_9_cu128_from_pypi(matrix):
    default = resolve(matrix, None)
    assert (default.name, default.cuda, default.is_default) == ("2.9-cu128", "12.8", True)
    assert default.torch.startswith("2.9.")
    assert [v.name for v in matrix.variants if v.is_default] == ["2.9-cu128"]
    assert default.uses_pypi


def test_cuda_11_8_carries_the_newest_torch_that_exists_and_says_so(matrix):
    variant = resolve(matrix, "11.8")
    assert variant.torch == max((v.torch for v in matrix.variants if v.cuda == "11.8"), key=_release)
    assert _release(variant.torch) < max(_release(v.torch) for v in matrix.variants)  # an older torch than the newest line
    assert "no CUDA 11.8 build" in variant.note and variant.torch in variant.note


def test_cuda_12_1_builds_the_pypi_line_and_the_newest_torch_on_request(matrix):
    """--cuda 12.1 builds the line PyPI alone serves; the newest CUDA 12.1 torch needs PyTorch's index."""
    first, *others = [v for v in matrix.variants if v.cuda == "12.1"]
    assert resolve(matrix, "12.1") == first and first.uses_pypi and first.builds_from == "PyPI alone"
    newest = max(others, key=lambda v: _release(v.torch))
    assert _release(newest.torch) > _release(first.torch) and not newest.uses_pypi
    assert resolve(matrix, "12.1", newest.torch_minor) == newest
    assert "PyTorch's index" in newest.builds_from and "no CUDA 12.1 build" in newest.note
    assert "PyPI alone" in first.note and f"--torch {newest.torch_minor}" in first.note


def test_a_line_behind_pytorchs_index_names_what_pypi_alone_builds(matrix):
    from pipeline.variants import pypi_alternatives

    cu121 = resolve(matrix, "12.1", "2.5")
    assert pypi_alternatives(
        matrix, cu121
    ) == f"from PyPI alone this host can build CUDA 12.1 as {resolve(matrix, '12.1').name} " + (
        f"(torch {resolve(matrix, '12.1').torch}): --cuda 12.1"
    )
    cu118 = resolve(matrix, "11.8")
    text = pypi_alternatives(matrix, cu118)
    assert text.startswith("the matrix has no CUDA 11.8 line on PyPI") and resolve(matrix, "12.1").name in text
    assert pypi_alternatives(matrix, resolve(matrix, None)) == ""


def test_every_line_that_builds_from_pypi_alone_has_a_hash_lock(matrix):
    from pipeline.lock import LAYERS, lock_dir

    for variant in (v for v in matrix.variants if v.uses_pypi):
        for file, _ in LAYERS:
            text = (lock_dir(variant) / file).read_text()
            pins = [ln for ln in text.splitlines() if "==" in ln and not ln.startswith("#")]
            assert pins and text.count("--hash=sha256:") >= len(pins), (variant.name, file)


@pytest.mark.parametrize("spelling", ["12.8", "cu128", " 12.8 ", "CU128"])
def test_cuda_spellings(matrix, spelling):
    assert resolve(matrix, spelling).name == "2.9-cu128"


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_torch_prefix_matches(matrix, parts):
    pinned = resolve(matrix, "12.8")
    request = ".".join(pinned.torch.split(".")[:parts])  # "2", "2.9", then the full pin
    assert resolve(matrix, "12.8", request).torch == pinned.torch


def test_torch_2_9_with_cuda_12_1_names_what_exists(matrix):
    with pytest.raises(UsageError) as err:
        resolve(matrix, "12.1", "2.9")
    message = str(err.value)
    assert "torch 2.9 has no CUDA 12.1 build" in message
    assert "12.6, 12.8, 13.0" in message
    newest = max((v for v in matrix.variants if v.cuda == "12.1"), key=lambda v: _release(v.torch))
    assert f"the newest torch with CUDA 12.1 is {newest.torch}" in message
    assert f"--cuda 12.1 builds {resolve(matrix, '12.1').name}" in message and f"--torch {newest.torch_minor} builds" in message
    assert "\n" not in message


def test_unknown_cuda_lists_the_lines(matrix):
    with pytest.raises(UsageError, match=r"unknown CUDA line 12\.4; this matrix has 11\.8, 12\.1, 12\.6, 12\.8, 13\.0"):
        resolve(matrix, "12.4")


@pytest.mark.parametrize("bad", ["twelve", "12", "12.8.1.1"])
def test_malformed_cuda(matrix, bad):
    with pytest.raises(UsageError):
        resolve(matrix, bad)


def test_unknown_torch(matrix):
    with pytest.raises(UsageError, match="no torch 3.0"):
        resolve(matrix, "12.8", "3.0")


def test_expectations_carry_the_pins(matrix):
    variant = resolve(matrix, matrix.default_cuda)
    exp = variant.expectations()
    assert (exp["torch"], exp["cuda"], exp["cudnn"], exp["min_driver"]) == (
        variant.torch,
        variant.cuda,
        variant.cudnn,
        variant.min_driver,
    )
    assert "require_gpu" not in exp  # whether a GPU is required is the caller's flag, not a pin


@pytest.mark.parametrize("name", ["2.7-cu118", "2.5-cu121", "2.9-cu126", "2.9-cu128", "2.11-cu130", "2.9-cu130"])
def test_baked_spec_is_valid_for_smoke_and_carries_the_gate(matrix, name):
    from smoke.expect import validate_expect

    variant = matrix.by_name(name)
    spec = variant.spec()
    assert validate_expect(spec["expect"]) == {**spec["expect"]}
    assert spec["ppo_gate"]["target_return"] == matrix.ppo_gate.target_return
    assert spec["ppo_gate"]["total_timesteps"] == matrix.ppo_gate.total_timesteps


def test_driver_floors_are_nvidias(matrix):
    """Each line's minimum driver is NVIDIA's for its CUDA major (minor-version compatibility)."""
    from smoke.rules import min_driver_for

    for variant in matrix.variants:
        assert variant.min_driver == min_driver_for(variant.cuda), variant.name


def _write(tmp_path, text):
    path = tmp_path / "variants.toml"
    path.write_text(text)
    return path


def test_malformed_toml_is_one_clear_error(tmp_path):
    with pytest.raises(MatrixError, match="not valid TOML"):
        load_matrix(_write(tmp_path, "[project\nname="))


def test_missing_key_is_named(tmp_path):
    head, tail = MATRIX_PATH.read_text().split('[variants."2.9-cu128"]')
    tail = re.sub(r"^torchaudio = .*\n", "", tail, count=1, flags=re.M)
    text = head + '[variants."2.9-cu128"]' + tail
    with pytest.raises(MatrixError, match=r'variants."2.9-cu128"\] is missing \'torchaudio\''):
        load_matrix(_write(tmp_path, text))


def test_loose_pin_is_refused(matrix, tmp_path):
    cu128 = matrix.by_name("2.9-cu128")
    head = '[variants."2.9-cu128"]\ncuda = "12.8"\n'
    exact, loose = f'{head}torch = "{cu128.torch}"', f'{head}torch = "{cu128.torch_minor}"'
    assert exact in MATRIX_PATH.read_text()
    text = MATRIX_PATH.read_text().replace(exact, loose)
    with pytest.raises(MatrixError, match="not an exact X.Y.Z pin"):
        load_matrix(_write(tmp_path, text))


def test_variant_name_must_match_cuda(tmp_path):
    text = MATRIX_PATH.read_text().replace('[variants."2.9-cu126"]', '[variants."2.9-cu127"]')
    with pytest.raises(MatrixError, match='name it "2.9-cu126"'):
        load_matrix(_write(tmp_path, text))


def test_missing_matrix_file(tmp_path):
    with pytest.raises(MatrixError, match="not found"):
        load_matrix(tmp_path / "nope.toml")
