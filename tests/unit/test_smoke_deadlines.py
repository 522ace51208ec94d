"""Every wait inside the image comes from one table (smoke.deadlines.DEADLINES, scaled under emulation);
a check that can hang runs in a bounded child; `proof` exits right after its verdict.

The bug behind it: the 2.11-cu130 arm64 proof failed its shm check on a fixed 60 s DataLoader
timeout under qemu, then printed its FAILED verdict and did not exit, waiting on a DataLoader
worker blocked on a futex, until the pipeline's 9,600 s deadline.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from common import deadlines, procs
from pipeline.render import spec_path
from pipeline.variants import load_matrix
from smoke import checks, facts, proof, shm_worker

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
EMULATED = deadlines.emulated_on_x86("aarch64")
MARK = "PROVEN_TORCH_DEADLINES_TEST_RUN"  # inherited by every process a test starts, read by no code


def default_spec() -> Path:
    matrix = load_matrix()
    return spec_path(matrix.by_name(next(v.name for v in matrix.variants if v.is_default)))


# --------------------------------------------------------------------------- the table, scaled


def test_every_deadline_stretches_by_the_emulation_scale_under_simulated_emulation(monkeypatch):
    monkeypatch.setenv("PROVEN_TORCH_EMULATED", EMULATED)
    assert deadlines.emulation() == EMULATED
    for name, seconds in deadlines.DEADLINES.items():
        assert deadlines.wait_for(name) == seconds * deadlines.EMULATION_SCALE, name
    monkeypatch.setattr(deadlines, "emulation", lambda *args, **kwargs: None)  # a native host
    for name, seconds in deadlines.DEADLINES.items():
        assert deadlines.wait_for(name) == seconds, name


def test_native_deadlines_are_the_ones_the_commands_always_had():
    """Moving them into the table changed no default on a native host."""
    native = {name: deadlines.wait_for(name, emulated=False) for name in deadlines.DEADLINES}
    assert native["ppo_gate"] == 900  # proof --ppo-timeout
    assert native["distributed"] == 120 and native["distributed"] / 2 == 60  # torchrun; each rank (dist_worker --timeout)
    assert native["shm"] / 2 == 60  # the shm check's DataLoader timeout
    assert native["stop_grace"] == 10 and native["quick_stop"] == 2 and native["dist_teardown"] == 10


class Recorded(Exception):
    """Raised by a stand-in once it has seen what it was called with."""


def test_the_checks_take_their_deadlines_from_the_table_under_simulated_emulation(monkeypatch):
    monkeypatch.setattr(deadlines, "emulation", lambda *args, **kwargs: EMULATED)
    calls = []

    def bounded(cmd, timeout, **kwargs):
        calls.append((cmd, timeout))
        return procs.Finished(None, "", "")

    monkeypatch.setattr(procs, "run_bounded", bounded)
    scale = deadlines.EMULATION_SCALE

    assert checks.run_distributed("gloo", 2).status == "fail"
    cmd, timeout = calls.pop()
    assert timeout == 120 * scale and float(cmd[cmd.index("--timeout") + 1]) == 60 * scale

    assert checks.shm_roundtrip(pin_memory=False) == f"no answer within {120 * scale:.0f} s (stopped)"
    cmd, timeout = calls.pop()
    assert timeout == 120 * scale and float(cmd[cmd.index("--timeout") + 1]) == 60 * scale
    assert cmd[1:3] == ["-m", "smoke.shm_worker"]


def test_stopping_takes_its_grace_from_the_table_under_simulated_emulation(monkeypatch):
    monkeypatch.setattr(deadlines, "emulation", lambda *args, **kwargs: EMULATED)
    graces = []
    real_stop = procs.stop_tree

    def watching_stop(proc, grace=None):
        graces.append(grace)
        real_stop(proc, 0)

    monkeypatch.setattr(procs, "stop_tree", watching_stop)
    assert procs.run_bounded([sys.executable, "-c", "import threading; threading.Event().wait()"], 0.5).returncode is None
    assert graces == [10 * deadlines.EMULATION_SCALE]

    def stopping(root, tree, grace):
        graces.append(grace)
        return tree

    monkeypatch.setattr(procs, "_stop", stopping)
    monkeypatch.setattr(procs, "descendants", lambda pid: [2**22 + 1])
    procs.stop_descendants()
    assert graces[-1] == 2 * deadlines.EMULATION_SCALE


def test_the_ppo_gate_deadline_under_simulated_emulation(monkeypatch, tmp_path):
    monkeypatch.setattr(deadlines, "emulation", lambda *args, **kwargs: EMULATED)

    def suite(*args, **kwargs):
        raise Recorded

    monkeypatch.setattr(proof.cli, "run_suite", suite)
    args = proof.parse_args(["--as-installed", "--spec", str(default_spec()), "--out", str(tmp_path)])
    out = io.StringIO()
    with pytest.raises(Recorded):
        proof.prove(args, out)
    gate = 900 * deadlines.EMULATION_SCALE
    assert args.ppo_timeout == gate and f"the gate may take {gate:.0f} s" in out.getvalue()


# --------------------------------------------------------------------------- no fixed wait in smoke/

NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
FIXED_WAITS = [
    # a name for a wait given a number: timeout=60, grace: float = 10.0, deadline = 30
    re.compile(r"\b\w*(?:timeout|grace|deadline)\w*\s*(?::\s*[\w.| \[\]]+)?(?<![=!<>])=(?!=)\s*" + NUMBER + r"(?![\w.])", re.I),
    # a constant of seconds: TEARDOWN_S = 10.0, DIST_TIMEOUT_S = 120.0
    re.compile(r"^\s*[A-Z][A-Z0-9_]*_S\s*(?::[^=\n]+)?=\s*" + NUMBER, re.M),
    # a command-line option for a wait with a number as its default
    re.compile(r"add_argument\(\s*\"--[\w-]*(?:timeout|grace|deadline|wait)[\w-]*\"[^)]*?\bdefault=\s*" + NUMBER),
    # a wait called with a number: done.wait(5), proc.join(30), Timer(60, ...), timedelta(seconds=60)
    re.compile(r"\b(?:wait|join|Timer|communicate|timedelta|wait_for)\(\s*(?:(?:timeout|seconds)\s*=\s*)?" + NUMBER),
]
SLEEP = re.compile(r"\bsleep\(\s*" + NUMBER)  # a poll of up to a second is not a wait


def fixed_waits(text: str) -> list[str]:
    """The fixed waits written down in `text`: numbers of seconds that no deadline helper scaled."""
    found = [m.group(0) for pattern in FIXED_WAITS for m in pattern.finditer(text) if float(m.group(1)) > 0]
    return found + [m.group(0) for m in SLEEP.finditer(text) if float(m.group(1)) > 1]


def test_the_scan_catches_the_fixed_waits_there_were():
    flagged = [
        "loader = DataLoader(ds, batch_size=8, num_workers=workers, pin_memory=pin_memory, timeout=60)",
        "DIST_TIMEOUT_S = 120.0",
        "PPO_TIMEOUT_S = 900.0",
        "TEARDOWN_S = 10.0",
        "def run_collectives(torch, dist, device, timeout: float = 60.0) -> dict:",
        'parser.add_argument("--timeout", type=float, default=60.0, help="seconds for init and each collective")',
        'parser.add_argument(\n    "--timeout",\n    type=float,\n    default=60.0,\n)',
        "def stop_tree(proc: subprocess.Popen, grace: float = 10.0) -> None:",
        "stop_tree(proc, grace=2.0)",
        "time.sleep(5)",
        "if done.wait(30):",
        "timeout = datetime.timedelta(seconds=60)",
        "timer = threading.Timer(60, stop)",
    ]
    for line in flagged:
        assert fixed_waits(line), line
    fine = [
        "time.sleep(0.1)",
        "last = procs.run_bounded(cmd, timeout, env=env, grace=0)",
        "timeout = deadlines.wait_for('shm') if timeout is None else timeout",
        'wait = 0 if hang == "shm" else timeout',
        "if timeout == 60: pass",
        "timeout_s = run_timeout",
    ]
    for line in fine:
        assert not fixed_waits(line), line


def test_no_fixed_wait_in_smoke_outside_the_table():
    """Every wait in smoke/ and common/ goes through deadlines.wait_for (DEADLINES): a new fixed one fails here."""
    found = {
        f"{path.parent.name}/{path.name}": waits
        for folder in ("smoke", "common")
        for path in sorted((REPO / folder).glob("*.py"))
        if path.name != "deadlines.py" and (waits := fixed_waits(path.read_text()))
    }
    assert found == {}, "fixed waits outside common/deadlines.py's DEADLINES: " + json.dumps(found)


# --------------------------------------------------------------------------- a check that hangs


def marked(run: str) -> list[int]:
    """Live processes started under MARK=run (the environment every child inherits)."""
    needle = f"{MARK}={run}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and procs.alive(int(entry.name)):
            pids.append(int(entry.name))
    return pids


def left_behind(run: str, within: float = 3.0) -> list[int]:
    """What is still running of `run` after `within` seconds (time for a killed process to be reaped)."""
    deadline = time.monotonic() + within
    while (pids := marked(run)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return pids


class Watch:
    """Every process of `run` seen while it runs (polled from a thread)."""

    def __init__(self, run: str) -> None:
        self.run, self.seen, self.done = run, set(), threading.Event()
        self.thread = threading.Thread(target=self.poll, daemon=True)
        self.thread.start()

    def poll(self) -> None:
        while not self.done.is_set():
            self.seen.update(marked(self.run))
            self.done.wait(0.2)

    def stop(self) -> set[int]:
        self.done.set()
        self.thread.join()
        return self.seen


@pytest.fixture(scope="module")
def host_facts():
    import torch

    return facts.collect(torch)


def test_a_dataloader_that_never_answers_fails_the_check_at_its_deadline(monkeypatch, host_facts):
    run = uuid.uuid4().hex
    monkeypatch.setenv(MARK, run)
    monkeypatch.setenv(shm_worker.TEST_HANG, "shm")  # its workers block forever, and so does its DataLoader
    monkeypatch.setitem(deadlines.DEADLINES, "shm", 8.0)
    size = 64 * 2**20
    started = time.monotonic()
    outcome = checks.check_shm(checks.Context(expect={}, require_gpu=False, facts={**host_facts, "shm_bytes": size}))
    took = time.monotonic() - started
    assert outcome.status == "fail"
    assert outcome.detail.startswith("DataLoader with 2 workers: no answer within 8 s (stopped); /dev/shm 64")
    assert "--shm-size" in outcome.detail and "\n" not in outcome.detail  # the shm advice, as before
    assert 8 <= took < 8 + 5, took
    assert left_behind(run) == []


@pytest.mark.process
def test_a_dataloader_timeout_is_answered_by_the_child_which_then_exits(monkeypatch):
    """The arm64 failure itself: the DataLoader's own timeout fires (workers that never answer);
    the child says so and exits at once, its workers stopped, well before the check's deadline."""
    run = uuid.uuid4().hex
    monkeypatch.setenv(MARK, run)
    monkeypatch.setenv(shm_worker.TEST_HANG, "shm-worker")
    watch = Watch(run)
    started = time.monotonic()
    problem = checks.shm_roundtrip(pin_memory=False, timeout=40)  # the child's DataLoader waits 20 s
    took = time.monotonic() - started
    seen = watch.stop()
    assert problem == "RuntimeError: DataLoader timed out after 20.0 seconds"
    assert 20 <= took < 40, took
    assert len(seen) >= 3, seen  # the child and its 2 workers
    assert left_behind(run) == []


# --------------------------------------------------------------------------- proof exits after its verdict

# `proof` as container/proof runs it (python -m smoke.proof, through its __main__), with the shm
# check's deadline cut short, the checks cut to two, and something of its own that never ends:
# a non-daemon thread and a child process, as a DataLoader worker blocked on a futex was.
PROOF_WITH_A_HANGING_CHECK = """
import runpy, subprocess, sys, threading
from common import deadlines
from smoke import checks
deadlines.DEADLINES["shm"] = float(sys.argv[1])
checks.CHECKS = tuple(c for c in checks.CHECKS if c[0] in ("versions", "shm"))
threading.Thread(target=threading.Event().wait).start()
subprocess.Popen([sys.executable, "-c", "import threading; threading.Event().wait()"])
sys.argv = ["proof", *sys.argv[2:]]
runpy.run_module("smoke.proof", run_name="__main__", alter_sys=True)
"""


@pytest.mark.process
def test_proof_with_a_check_that_never_answers_fails_and_exits_right_after_its_verdict(tmp_path):
    run, deadline = uuid.uuid4().hex, 20.0
    env = {**os.environ, MARK: run, shm_worker.TEST_HANG: "shm"}
    out = tmp_path / "out"
    argv = [sys.executable, "-c", PROOF_WITH_A_HANGING_CHECK, str(deadline)]
    argv += ["--as-installed", "--spec", str(default_spec()), "--out", str(out)]
    started = time.monotonic()
    with open(tmp_path / "stdout", "w") as stdout:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True)
    watch = Watch(run)
    lines: list[tuple[float, str]] = []  # (when, line) of its stderr, read apart: a child of its own may hold the pipe

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append((time.monotonic(), line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=deadline + 90)
        exited_at = time.monotonic()
    finally:
        if proc.poll() is None:  # it did not exit: stop it and all of its own, then fail
            procs.stop_tree(proc, grace=0)
        seen = watch.stop()
    reader.join(timeout=5)  # what it wrote before it exited is read by now (a pipe still held open: no end)
    verdict_at = next((when for when, line in lines if line.startswith("proof: FAILED")), None)
    assert verdict_at is not None, "\n".join(line for _, line in lines[-20:])
    assert code == proof.EXIT_FAILED
    assert exited_at - verdict_at < 5, exited_at - verdict_at
    assert exited_at - started < deadline + 30
    record = json.loads((out / "proof.json").read_text())
    assert record["verdict"] == "proof: FAILED: smoke check(s) failed: shm" == lines[-1][1]
    shm = next(c for c in record["smoke"]["checks"] if c["name"] == "shm")
    assert shm["status"] == "fail" and shm["detail"].startswith(f"DataLoader with 2 workers: no answer within {deadline:.0f} s")
    assert deadline <= shm["seconds"] < deadline + 5
    assert len(seen) >= 1 + 1 + 3, seen  # proof, its never-ending child, the check's child and its 2 workers
    assert left_behind(run) == []
