"""Stopping, in one place: host commands have deadlines and are stopped with their children;
Ctrl-C becomes one Interrupted naming the step, and the matrix stops at the line it was in."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from common.deadlines import DEADLINES
from common.procs import alive
from pipeline import all_lines as matrix_run
from pipeline import hostprocs
from pipeline.errors import Interrupted, ValidationFailed
from pipeline.request import Request

pytestmark = pytest.mark.unit

# A command that forks a grandchild in a session of its own (as a launcher may), writes the
# grandchild's pid, and then both sleep far past any deadline here.
FORKING = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
open(sys.argv[1], "w").write(str(child.pid))
print("started", flush=True)
time.sleep(600)
"""


def test_every_kind_of_host_command_has_a_deadline():
    assert all(seconds > 0 for seconds in DEADLINES.values())
    for kind in ("docker build", "docker push", "skopeo copy", "docker manifest", "uv pip compile", "git"):
        assert kind in DEADLINES


def test_a_host_command_past_its_deadline_is_stopped_with_its_children(tmp_path, monkeypatch):
    monkeypatch.setattr(hostprocs, "GRACE_S", 1.0)
    monkeypatch.setitem(DEADLINES, "docker probe", 3.0)  # 30 s in the table
    pid_file = tmp_path / "grandchild"
    lines: list[str] = []
    start = time.monotonic()
    ran = hostprocs.run_host([sys.executable, "-c", FORKING, str(pid_file)], "docker probe", on_line=lines.append)
    took = time.monotonic() - start
    assert ran.returncode is None  # stopped at the deadline
    assert "started" in lines
    assert 3.0 <= took < 3.0 + 10, took  # the table's deadline for the kind, grace, and no waiting on the grandchild
    grandchild = int(pid_file.read_text())
    for _ in range(50):
        if not alive(grandchild):
            break
        time.sleep(0.1)
    assert not alive(grandchild), "the forked grandchild outlived the deadline"


def test_a_host_command_that_cannot_start_is_exit_127_not_a_traceback():
    ran = hostprocs.run_host(["/nonexistent/docker", "version"], "docker probe")
    assert ran.returncode == 127 and "cannot run /nonexistent/docker" in ran.stderr


def test_ctrl_c_during_a_host_command_stops_it_and_names_the_step(tmp_path, monkeypatch):
    """A real SIGINT to this process while run_host waits: Interrupted naming the step, the tree gone."""
    monkeypatch.setitem(DEADLINES, "docker build", 60)  # a lost SIGINT fails the test in a minute, not hours
    pid_file = tmp_path / "grandchild"
    timer_pid = os.getpid()

    def interrupt_soon() -> None:
        for _ in range(100):
            if pid_file.exists() and pid_file.read_text():
                break
            time.sleep(0.05)
        os.kill(timer_pid, signal.SIGINT)

    import threading

    # Python's own Ctrl-C handler, whatever this runner inherited: pytest started with `&` by a
    # non-interactive shell (scripts/run-tests.sh runs the unit group so) ignores SIGINT.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=interrupt_soon, daemon=True).start()
    try:
        with pytest.raises(Interrupted) as err:
            hostprocs.run_host([sys.executable, "-c", FORKING, str(pid_file)], "docker build", what="docker build of x")
    finally:
        signal.signal(signal.SIGINT, inherited)
    assert str(err.value) == "interrupted during docker build of x"
    grandchild = int(pid_file.read_text())
    for _ in range(50):
        if not alive(grandchild):
            break
        time.sleep(0.1)
    assert not alive(grandchild)


def test_step_turns_ctrl_c_into_interrupted_and_leaves_other_errors_alone():
    with pytest.raises(Interrupted, match="^interrupted during the push of r:t$"):
        with hostprocs.step("the push of r:t"):
            raise KeyboardInterrupt
    with pytest.raises(ValueError):
        with hostprocs.step("x"):
            raise ValueError("not ours")


def _config(lines, tmp_path: Path) -> Request:
    return Request(matrix=lines, variant=lines.variants[0], report_dir=tmp_path, allow_cpu_validation=True)


def test_ctrl_c_in_a_matrix_line_stops_the_matrix_naming_the_line(matrix, tmp_path, monkeypatch):
    """Interrupted is a PipelineError, but the matrix must not record it as a failed line and go on."""
    pypi = [v for v in matrix.variants if v.uses_pypi][:2]
    assert len(pypi) == 2, "the matrix has two lines that build from PyPI"
    started: list[str] = []

    def fake_run(config):
        started.append(config.variant.name)
        if len(started) == 1:
            raise ValidationFailed("first line failed")  # a failure: recorded, the matrix goes on
        raise Interrupted("interrupted during the proof; nothing was tagged or pushed")

    monkeypatch.setattr("pipeline.all_lines.run", fake_run)
    names = [pypi[0].name, pypi[1].name, pypi[0].name]
    with pytest.raises(Interrupted) as err:
        matrix_run.run_matrix(_config(matrix, tmp_path), names, keep=False)
    assert started == names[:2], "no line starts after Ctrl-C"
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"matrix stopped in {pypi[1].name}: interrupted during the proof")
    assert f"lines finished before it: {pypi[0].name}: failed" in text and "nothing was pushed" in text


def test_a_bare_keyboardinterrupt_between_steps_stops_the_matrix_too(matrix, tmp_path, monkeypatch):
    def fake_run(config):
        raise KeyboardInterrupt

    monkeypatch.setattr("pipeline.all_lines.run", fake_run)
    line = next(v for v in matrix.variants if v.uses_pypi)
    with pytest.raises(Interrupted, match=f"^matrix stopped in {line.name}: interrupted; lines finished before it: none"):
        matrix_run.run_matrix(_config(matrix, tmp_path), [line.name], keep=False)


@pytest.mark.skipif(__import__("pipeline.docker_env", fromlist=["x"]).host_gpu_count() > 0, reason="this host has a GPU")
def test_require_gpu_turns_the_gpu_groups_skip_into_a_failure():
    """What gpu.yml and the release's GPU job set: no GPU visible is a failure, not a green skip."""
    import subprocess

    from pipeline.variants import REPO_ROOT

    argv = [sys.executable, "-m", "pytest", "-m", "gpu", "tests/gpu", "-q", "-p", "no:cacheprovider", "-o", "addopts="]
    env = {k: v for k, v in os.environ.items() if k not in ("PROVEN_TORCH_TEST_IMAGE",)}
    required = subprocess.run(argv, capture_output=True, text=True, cwd=REPO_ROOT, env={**env, "REQUIRE_GPU": "1"}, timeout=300)
    assert required.returncode == 1, required.stdout[-2000:]
    assert "REQUIRE_GPU=1 but no NVIDIA GPU visible on this host" in required.stdout
    assert " error" in required.stdout.splitlines()[-1] and "skipped" not in required.stdout.splitlines()[-1]  # fails at set-up
    relaxed = subprocess.run(argv, capture_output=True, text=True, cwd=REPO_ROOT, env={**env, "REQUIRE_GPU": "0"}, timeout=300)
    assert relaxed.returncode == 0 and "skipped" in relaxed.stdout and "failed" not in relaxed.stdout, relaxed.stdout[-2000:]


def test_require_gpu_refuses_a_build_on_a_host_without_one(matrix, monkeypatch, tmp_path):
    from pipeline.errors import UsageError
    from pipeline.request import check_request

    monkeypatch.setenv("REQUIRE_GPU", "1")
    with pytest.raises(UsageError, match="^REQUIRE_GPU=1 but this host has no GPU visible"):
        check_request(_config(matrix, tmp_path), gpus=0)
    check_request(_config(matrix, tmp_path), gpus=1)


def test_no_host_command_is_given_the_signing_keys_passphrase(monkeypatch):
    """The passphrase is the signer's alone: docker, skopeo, git and the rest run without it, from this
    process's environment or from one a caller built out of it (BuildCli.environ, the docker CLI's)."""
    import os

    monkeypatch.setenv(hostprocs.PASSPHRASE_ENV, "s3cret-passphrase")
    for env in (None, {**os.environ, "OTHER_SETTING": "kept"}):
        done = hostprocs.run_host(["env"], "git", env=env)
        assert done.returncode == 0 and "PATH=" in done.stdout
        assert "s3cret-passphrase" not in done.stdout and hostprocs.PASSPHRASE_ENV not in done.stdout
        assert env is None or "OTHER_SETTING=kept" in done.stdout


def test_a_process_started_outside_run_host_is_given_the_host_environment_too():
    """The one process pipeline/ starts with subprocess itself besides the signer (rebuild's zstd) inherited
    the passphrase: every such call must pass env=hostprocs.host_env(...) (attest.py's signer is the one user)."""
    import ast

    from pipeline.variants import REPO_ROOT

    calls = {"subprocess.Popen", "subprocess.run", "subprocess.call", "subprocess.check_output", "subprocess.check_call"}
    unguarded, seen = [], 0
    for path in sorted((REPO_ROOT / "pipeline").rglob("*.py")):
        if path.name == "attest.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in calls:
                seen += 1
                if not any(k.arg == "env" and "host_env(" in ast.unparse(k.value) for k in node.keywords):
                    unguarded.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert seen and unguarded == []
