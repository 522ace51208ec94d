"""build.py's command line: what it refuses before any work (one line, exit 2), and what
`build.py list` prints, which comes from pipeline.listing. No Docker, no network."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys

import pytest

import build
from pipeline import listing
from pipeline.errors import UsageError
from pipeline.variants import REPO_ROOT

pytestmark = pytest.mark.unit

LIST_OUTPUTS = [("--markdown",), ("--json",), ("--default",), ("--base-image", "linux/amd64"), ("--pin", "gymnasium")]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "build.py"), *args], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT
    )


def _refused(result: subprocess.CompletedProcess) -> str:
    """The one line a refused command line writes, after checking it exited 2 and wrote nothing else."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# --- list: one output at a time ------------------------------------------------------


def test_list_json_and_markdown_together_exit_2_naming_both():
    line = _refused(_cli("list", "--json", "--markdown"))
    assert line.startswith("build.py list: argument ") and line.endswith("(see --help)")
    assert "--json" in line and "--markdown" in line and "not allowed with" in line


@pytest.mark.parametrize(("first", "second"), [(a, b) for i, a in enumerate(LIST_OUTPUTS) for b in LIST_OUTPUTS[i + 1 :]])
def test_any_two_list_outputs_exit_2_naming_both(first, second):
    line = _refused(_cli("list", *first, *second))
    assert first[0] in line and second[0] in line and "not allowed with" in line


def test_list_pin_repeated_is_one_output():
    """scripts/host-venv.sh asks for several packages with one --pin each."""
    result = _cli("list", "--pin", "gymnasium", "--pin", "rlhf")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) >= 2 and result.stdout.startswith("gymnasium==")


def test_list_usage_shows_the_outputs_as_alternatives():
    assert "[--markdown | --json | --default | --base-image PLATFORM | --pin PACKAGE]" in _cli("list", "--help").stdout


# --- lock --check refuses what it would ignore ---------------------------------------


@pytest.mark.parametrize("given", [("--cuda", "12.8"), ("--torch", "2.9"), ("--flavor", "rlhf"), ("--flavor", "base")])
def test_lock_check_refuses_a_line_choice(given):
    line = _refused(_cli("lock", "--check", *given))
    assert line == "build.py lock: --check checks every line's lock; it takes no --cuda, --torch or --flavor (see --help)"


def test_lock_check_refusal_does_not_depend_on_the_order():
    line = _refused(_cli("lock", "--cuda", "12.8", "--check"))
    assert line.startswith("build.py lock: --check checks every line's lock")


# --- a flag of another command names that command ------------------------------------


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (("list", "--push"), "build.py list: --push is a flag of `build.py build`, not of `list`"),
        (("list", "--cuda", "12.8"), "build.py list: --cuda is a flag of `build.py build` and `build.py lock`, not of `list`"),
        (
            ("list", "-v"),
            "build.py list: -v is a flag of `build.py build` and `build.py matrix` and `build.py rebuild`, not of `list`",
        ),
        (("render", "--report-dir=x"), "--report-dir is a flag of `build.py build` and `build.py report` and `build.py matrix`"),
        (("lock", "--line", "2.9-cu128"), "build.py lock: --line is a flag of `build.py matrix`, not of `lock`"),
        (
            ("matrix", "--json"),
            "build.py matrix: --json is a flag of `build.py list` and `build.py verify` and `build.py diff`, not of `matrix`",
        ),
        (("--push", "--check"), "build.py build: --check is a flag of `build.py render` and `build.py lock`, not of `build`"),
        (("list", "--bogus"), "build.py list: unrecognized arguments: --bogus"),
    ],
)
def test_a_stray_flag_names_its_command(args, text):
    line = _refused(_cli(*args))
    assert text in line and line.endswith("(see --help)")


def _help_options(parser, command: str) -> set[str]:
    """The option strings `build.py COMMAND --help` lists (argparse's public help output)."""
    out = io.StringIO()
    with pytest.raises(SystemExit), contextlib.redirect_stdout(out):
        parser.parse_args([command, "--help"])
    heads = (m.group(1) for m in re.finditer(r"^  (-\S.*?)(?:\s{2,}|$)", out.getvalue(), re.MULTILINE))
    return {flag for head in heads for flag in re.findall(r"(?:^|, )(-{1,2}[a-z][\w-]*)", head)} - {"-h", "--help"}


@pytest.mark.parametrize("command", list(build.COMMANDS))
def test_the_recorded_flags_are_the_ones_each_command_takes(command):
    parser, flags = build.make_parser()
    assert set(flags) == set(build.COMMANDS)
    assert set(flags[command]) == _help_options(parser, command)


# --- what list prints is pipeline.listing's -----------------------------------------


def test_list_prints_the_listing(matrix):
    assert _cli("list").stdout == listing.variant_table_text(matrix) + "\n"
    assert _cli("list", "--markdown").stdout == listing.variant_table_markdown(matrix) + "\n"
    assert _cli("list", "--default").stdout == listing.default_variant(matrix) + "\n"
    assert _cli("list", "--base-image", "linux/amd64").stdout == matrix.base_image_for("linux/amd64") + "\n"


def test_the_json_has_one_entry_per_variant_and_flavor(matrix):
    entries = json.loads(_cli("list", "--json").stdout)
    assert [e["variant"] for e in entries] == [v.name for v in matrix.every_variant()]
    assert sum(e["default"] for e in entries) == 1
    keys = {"variant", "cuda", "torch", "flavor", "default", "platforms", "multi_arch"}
    assert all(set(e) - {"pins_note"} == keys for e in entries)  # a line whose pins need a word has its note too


def test_the_table_lists_each_line_with_its_flavors_and_ends_with_the_key(matrix):
    text = listing.variant_table_text(matrix)
    assert text.splitlines()[0].startswith("variant ")
    assert text.splitlines()[-3].startswith("* default; advisories:") and text.splitlines()[-2].startswith("[1] ")
    assert text.splitlines()[-1].startswith("signing: ")
    default = listing.default_variant(matrix)
    assert any(line.startswith(f"{default}*") for line in text.splitlines())
    for flavored in matrix.flavored_variants():
        assert f"note: {flavored.flavor} flavor of {flavored.base_name}: adds " in text


def test_pin_lines(matrix):
    name, version = matrix.packages[0]
    assert listing.pin_lines(matrix, [name]) == f"{name}=={version}"
    flavor = matrix.flavors[0]
    assert listing.pin_lines(matrix, [flavor.name]).splitlines() == [f"{n}=={v}" for n, v in flavor.packages]
    with pytest.raises(UsageError, match="--pin nope: not a package or flavor"):
        listing.pin_lines(matrix, ["nope"])


# --- build.py parses and dispatches; the commands' bodies are in pipeline/ -----------


def _fake_run(seen: list, tmp_path, fail: tuple[str, ...] = ()):
    """pipeline.line.run without Docker: records each config; a line in `fail` fails its proof."""
    from pipeline.errors import ValidationFailed
    from pipeline.line import RunResult

    def fake_run(config):
        seen.append(config)
        if config.variant.name in fail:
            raise ValidationFailed(f"{config.variant.name} failed its proof")
        report = tmp_path / f"{config.variant.name}.json"
        report.write_text(json.dumps({"status": "validated", "variant": config.variant.name, "build_seconds": 12.5}))
        tags = [f"{config.repo}:{config.variant.name}"]
        return RunResult("sha256:v", "sha256:s", tags, {tags[0]: "sha256:d"} if config.push else {}, report, gpu=False)

    return fake_run


def test_build_hands_every_flag_to_the_run_and_prints_its_done_line(matrix, tmp_path, monkeypatch, capsys):
    seen: list = []
    monkeypatch.setattr("pipeline.line.run", _fake_run(seen, tmp_path))
    line = matrix.variants[0]
    argv = ["--cuda", line.cuda, "--torch", line.torch_minor, "--push", "--registry", "localhost:5000", "--repo", "me/pt"]
    argv += ["--compression", "zstd", "--hold-moving-tags", "--allow-cpu-validation", "--report-dir", str(tmp_path), "-v"]
    assert build.main(argv) == 0
    [config] = seen
    assert config.variant.name == line.name and config.platforms == ("linux/amd64",) and config.repo == "me/pt"
    assert (config.push, config.registry, config.compression, config.hold_moving_tags) == (True, "localhost:5000", "zstd", True)
    assert config.allow_cpu_validation and config.verbose and config.report_dir == tmp_path
    assert capsys.readouterr().out == f"==> done: me/pt:{line.name} (pushed)\n"


def test_matrix_prints_its_summary_and_exits_5_naming_the_failed_line(matrix, tmp_path, monkeypatch, capsys):
    pypi = [v.name for v in matrix.variants if v.uses_pypi][:2]
    seen: list = []
    monkeypatch.setattr("pipeline.all_lines.run", _fake_run(seen, tmp_path / "runs", fail=(pypi[1],)))
    (tmp_path / "runs").mkdir()
    argv = ["matrix", "--line", pypi[0], "--line", pypi[1], "--keep", "--report-dir", str(tmp_path / "reports")]
    assert build.main(argv) == 5
    assert [c.variant.name for c in seen] == pypi and not any(c.push for c in seen)
    out, err = capsys.readouterr()
    [md] = (tmp_path / "reports" / "matrix").glob("*/summary.md")
    assert out.startswith(f"==> matrix: {pypi[0]} (") and "\nMatrix run on " in out
    assert f"| {pypi[0]} | " in out and f"| {pypi[1]} | " in out and "proven (CPU only)" in out
    assert out.endswith(f"==> matrix summary: {md} and summary.json\n")
    assert err == f"build.py: matrix: {pypi[1]} failed; see {md}\n"


def test_a_keyboardinterrupt_outside_a_run_says_interrupted_and_claims_nothing(monkeypatch, capsys):
    """The pipeline's own Interrupted says what was tagged or pushed; main cannot know, so it does not say."""

    def interrupted(matrix, args):
        raise KeyboardInterrupt

    monkeypatch.setattr(build, "dispatch", interrupted)
    assert build.main(["list"]) == 130
    assert capsys.readouterr().err == "build.py: interrupted\n"


# --- without the host venv ----------------------------------------------------------


def _bare(*args: str) -> subprocess.CompletedProcess:
    """build.py on a Python with no site-packages: what a new user's system python3 has."""
    return subprocess.run(
        [sys.executable, "-S", "-E", "-s", "build.py", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "args", [("list", "--json"), ("list", "--default"), ("list", "--pin", "gymnasium")], ids=["json", "default", "pin"]
)
def test_what_the_workflows_ask_runs_on_bare_python(args):
    done = _bare(*args)
    assert done.returncode == 0 and done.stdout and not done.stderr, done.stderr


@pytest.mark.parametrize(
    "args", [("list",), ("list", "--debug"), ("verify", "r:t", "--key", "k")], ids=["list", "debug", "verify"]
)
def test_a_command_that_needs_the_venv_says_so_with_the_fix_not_report_it(args):
    done = _bare(*args)
    (line,) = done.stderr.strip().splitlines()
    assert done.returncode == 2 and f"build.py {args[0]}: needs the host venv (no module" in line, done.stderr
    assert f"`.venv/bin/python build.py {args[0]} ...`" in line and "report it" not in line


def test_debug_is_taken_before_or_after_the_command():
    parser, _ = build.make_parser()
    assert parser.parse_args(["list", "--debug"]).debug is True
    assert parser.parse_args(["--debug", "list"]).debug is True
    assert parser.parse_args(["list"]).debug is False


# --- list --here: can this host build it? ------------------------------------------------


def test_list_here_names_an_unreachable_index_and_what_to_do(tmp_path):
    """A line whose wheel index does not answer (a name under .invalid never resolves) is not buildable here,
    and says why and what builds it instead; plain `list --json` probes nothing and says nothing of it."""
    text = (
        (REPO_ROOT / "images" / "variants.toml")
        .read_text()
        .replace("https://download.pytorch.org/whl/cu118", "https://index.invalid/whl/cu118")
    )
    (tmp_path / "variants.toml").write_text(text)
    done = _cli("--matrix", str(tmp_path / "variants.toml"), "list", "--json", "--here")
    lines = {entry["variant"]: entry for entry in json.loads(done.stdout)}
    here = lines["2.7-cu118"]["here"]
    assert here["buildable"] is False and "its wheel index https://index.invalid/whl/cu118 is unreachable" in here["why"]
    assert "release workflow" in here["fix"] and here["validates_on"] and here["next"] == ""
    assert "here" not in json.loads(_cli("list", "--json").stdout)[0]
    flavor = next(e for e in lines.values() if e["flavor"] != "base" and e["here"]["buildable"])
    base = lines[flavor["variant"].removesuffix(f"-{flavor['flavor']}")]
    # what to run next: the Lab of the image built here, or the build that makes it (the flags `build` takes)
    for entry in (flavor, base):
        built, step = entry["here"]["built"], entry["here"]["next"]
        if built:
            assert step == f"docker run --rm -p 127.0.0.1:8888:8888 {built}"
        else:
            assert step.startswith(f"python build.py --cuda {entry['cuda']}"), step
    assert flavor["here"]["built"] or flavor["here"]["next"].endswith(f"--flavor {flavor['flavor']}")


def test_a_line_whose_packages_skip_a_release_says_why_in_a_footnote(matrix):
    noted = [v for v in matrix.variants if v.pins_note]
    assert [v.name for v in noted] == ["2.15-cu132"] and "torchaudio" in noted[0].pins_note
    text = listing.variant_table_text(matrix)
    assert "2.15-cu132  [1]" in text and f"[1] 2.15-cu132: {noted[0].pins_note}." in text
    assert f"[1] 2.15-cu132: {noted[0].pins_note}." in listing.variant_table_markdown(matrix)


def test_an_unknown_command_says_so_and_lists_the_commands(capsys):
    status = build.main(["frobnicate", "--json"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1
    assert "'frobnicate' is no command" in err and all(name in err for name in build.COMMANDS)


def _help_text(parser, command: str) -> str:
    out = io.StringIO()
    with pytest.raises(SystemExit), contextlib.redirect_stdout(out):
        parser.parse_args([command, "--help"])
    return " ".join(out.getvalue().split())


def test_each_command_says_what_its_own_json_prints():
    parser, _ = build.make_parser()
    helps = {name: _help_text(parser, name) for name in ("list", "verify", "diff")}
    assert "the matrix as JSON" in helps["list"] and "the matrix" not in helps["verify"] and "schema 1" in helps["diff"]


def test_verify_of_a_local_image_name_says_verify_reads_a_registry(tmp_path):
    from pipeline.attest import keygen

    _, public, _ = keygen(tmp_path / "k")
    done = _cli("verify", "proven-torch:2.9-cu128", "--key", str(public), "--timeout", "5")
    assert done.returncode == 6 and done.stderr.count("\n") == 1, done.stderr
    assert "verify reads a registry, never this host's images: push it first" in done.stderr
