"""gymnasium's extras and the lock's overrides: what the matrix declares, what uv is asked for on
each platform, and the one pip check finding each override may make (container/pip_check.py)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from pipeline import lock
from pipeline.errors import MatrixError
from pipeline.render import render
from pipeline.variants import AMD64, ARM64, REPO_ROOT, load_matrix, resolve

pytestmark = pytest.mark.unit

spec = importlib.util.spec_from_file_location("pip_check", REPO_ROOT / "container" / "pip_check.py")
pip_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pip_check)

MOVIEPY = "moviepy 2.2.1 has requirement pillow<12.0,>=9.2.0, but you have pillow 13.0.0."


def test_the_default_line_installs_every_claimed_extra(matrix):
    variant = resolve(matrix, matrix.default_cuda)
    assert set(variant.extras()) == {"torch", "classic-control", "toy-text", "atari", "mujoco", "box2d", "other"}
    assert lock.requirements_in(variant).count("gymnasium[") == 1
    assert f"gymnasium[{','.join(variant.extras())}]==" in lock.requirements_in(variant)


def test_arm64_leaves_box2d_out_and_says_why(matrix):
    line = next(v for v in matrix.variants if v.multi_arch)
    assert "box2d" not in line.extras(ARM64) and "box2d" in line.extras(AMD64)
    assert "no aarch64 wheel" in line.left_out(ARM64)["box2d"]
    assert "box2d" not in lock.requirements_in(line, ARM64) and "box2d" in lock.requirements_in(line, AMD64)


def test_an_unlocked_line_installs_every_extra_but_the_one_that_needs_an_override(matrix):
    """An unlocked line installs with pip, which cannot override moviepy's pillow cap: its Dockerfile asks
    for every extra the locked default line has but `other`, and the matrix says why `other` is out."""
    line = resolve(matrix, "11.8")
    (asked,) = re.findall(r'"gymnasium\[([a-z0-9,-]+)\]==', render(matrix, line))
    locked = set(resolve(matrix, matrix.default_cuda).extras())
    assert set(asked.split(",")) == locked - {"other"} and set(line.left_out(locked=False)) == {"other"}
    assert "pillow" in line.left_out(locked=False)["other"]


def test_the_lock_asks_uv_for_the_overrides_and_a_changed_override_makes_it_stale(matrix, tmp_path):
    variant = resolve(matrix, matrix.default_cuda)
    assert lock.overrides_txt(variant) == "".join(f"{o.requirement}\n" for o in variant.overrides)
    assert "pillow>=12\n" in lock.overrides_txt(variant)
    before = lock.inputs_digest(matrix, variant)
    text = matrix.path.read_text().replace('"pillow>=12" = {', '"pillow>=12.1" = {')
    changed = tmp_path / "variants.toml"
    changed.write_text(text)
    assert lock.inputs_digest(load_matrix(changed), resolve(load_matrix(changed), matrix.default_cuda)) != before


def test_each_override_with_a_package_names_the_conflict_pip_check_accepts(matrix):
    variant = resolve(matrix, matrix.default_cuda)
    for override in variant.overrides:
        assert override.reason
        if override.package:
            assert override.conflict and override.link.startswith("https://")
            assert f"--accept '{override.package}:{override.conflict}'" in render(matrix, variant)


@pytest.mark.parametrize(
    ("table", "error"),
    [
        ('[gymnasium]\nextras = ["torch"]\n[gymnasium.left_out."linux/s390x"]\ntorch = "x"\n', "not a platform"),
        ('[gymnasium]\nextras = ["torch"]\n[gymnasium.left_out.unlocked]\nmujoco = "x"\n', "must map extras"),
        ('[overrides]\n"pillow>=12" = { package = "moviepy" }\n', "needs a reason"),
        ('[overrides]\n"pillow>=12" = { reason = "r", why = "w" }\n', "unknown keys"),
    ],
)
def test_a_malformed_extras_or_overrides_table_is_one_line(tmp_path, table, error):
    text = (REPO_ROOT / "images" / "variants.toml").read_text()
    text = text.split("\n[gymnasium]\n")[0] + "\n" + table + "\n[ppo_gate]" + text.split("\n[ppo_gate]", 1)[1]
    path = tmp_path / "variants.toml"
    path.write_text(text)
    with pytest.raises(MatrixError, match=error):
        load_matrix(path)


# --------------------------------------------------------------------------- pip check in the build


def test_pip_check_accepts_exactly_the_overridden_requirement():
    accepted, refused = pip_check.judge([MOVIEPY], ["moviepy:pillow<12.0,>=9.2.0"], sbsa=False, machine="x86_64")
    assert len(accepted) == 1 and refused == []
    other = "moviepy 2.2.1 has requirement numpy>=1.25.0, but you have numpy 1.24.0."
    assert pip_check.judge([other], ["moviepy:pillow<12.0,>=9.2.0"], False, "x86_64")[1] == [other]
    assert pip_check.judge([MOVIEPY], [], False, "x86_64")[1] == [MOVIEPY]


def test_pip_check_accepts_the_sbsa_tag_only_on_aarch64_and_only_for_sbsa_wheels():
    line = "nvidia-cusparselt-cu13 0.8.0 is not supported on this platform"
    assert pip_check.judge([line], [], True, "aarch64", is_sbsa=lambda _: True)[1] == []
    assert pip_check.judge([line], [], True, "aarch64", is_sbsa=lambda _: False)[1] == [line]
    assert pip_check.judge([line], [], True, "x86_64", is_sbsa=lambda _: True)[1] == [line]
    assert pip_check.judge([line], [], False, "aarch64", is_sbsa=lambda _: True)[1] == [line]


def test_a_clean_pip_check_has_nothing_to_accept():
    assert pip_check.judge(["No broken requirements found."], [], False, "x86_64") == ([], [])


# --------------------------------------------------------------------------- build.py lock says when an override can go


def test_lock_says_whether_an_override_is_still_needed(matrix):
    override = next(o for o in resolve(matrix, matrix.default_cuda).overrides if o.package)
    still = lock.override_news(override, ("2.2.1", ["pillow<12.0,>=9.2.0", "numpy>=1.25.0"]))
    assert "still needed" in still and override.link in still
    gone = lock.override_news(override, ("2.3.0", ["pillow>=9.2.0", "numpy>=1.25.0"]))
    assert "can go" in gone and "2.3.0" in gone
    assert "could not ask PyPI" in lock.override_news(override, None)


def test_the_dockerfile_is_what_render_writes(matrix):
    variant = resolve(matrix, matrix.default_cuda)
    assert Path(REPO_ROOT / "Dockerfile.cu128").read_text() == render(matrix, variant)
