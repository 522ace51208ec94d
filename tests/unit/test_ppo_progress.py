"""What `python -m ppo_bench` tells while it runs, as a user under `| tee` reads it: progress at a
steady cadence whatever stdout is, a time-bounded run's own bound instead of a step total it
cannot know, the wall time it really took, and the host's condition during the run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.unit, pytest.mark.process]

REPO = Path(__file__).resolve().parents[2]
TRAINING = re.compile(r" training=([\d.]+)s ")
PROCESS = re.compile(r" process=([\d.]+)s ")


def run_timed(args: list[str], timeout: float = 300) -> tuple[int, list[tuple[float, str]], float]:
    """`python -m ppo_bench ARGS` with stdout a pipe (as under `| tee`): its exit code, each line with the
    moment it arrived here (time.monotonic()), and how long the process ran."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ppo_bench", *args], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    lines = []
    try:
        for line in proc.stdout:
            lines.append((time.monotonic(), line.rstrip("\n")))
        code = proc.wait()
    finally:
        watchdog.cancel()
    return code, lines, time.monotonic() - started


def arrived(lines, start: str) -> list[tuple[float, str]]:
    return [(t, line) for t, line in lines if line.startswith(start)]


def test_a_time_bounded_atari_run_prints_its_real_wall_time_and_no_step_total(tmp_path):
    """--time-limit 5 on ALE/Breakout-v5 (2 environments x 32 steps: short iterations): the wall time it
    prints is the one measured here between its first line and its last progress line, within 10%."""
    out = tmp_path / "atari"
    code, lines, process_seconds = run_timed(
        ["--env-id", "ALE/Breakout-v5", "--time-limit", "5", "--num-envs", "2", "--num-steps", "32", "--threads", "1"]
        + ["--checkpoint-every", "0", "--progress-interval", "1", "--out-dir", str(out)]
    )
    text = "\n".join(line for _, line in lines)
    assert code == 0, text
    [(t_first, first)] = arrived(lines, "ppo_bench: ALE/Breakout-v5 (atari backend)")
    assert "for 5 s (--time-limit" in first and lines[0][1] == first, text  # the first line, before any update
    steps = arrived(lines, "ppo_bench: step ")
    t_last, last = steps[-1]
    assert last.endswith("| stopped: the time limit (5 s) passed during its last iteration"), text
    # No total beyond the run's own: a time-bounded run counts seconds against its limit, never steps against a total.
    assert all("s of 5s (time limit)" in line and not re.search(r"step [\d,]+/", line) for _, line in steps), text
    [(_, summary)] = arrived(lines, "ppo_bench: solved=")
    printed = float(TRAINING.search(summary).group(1))
    measured = t_last - t_first
    assert abs(printed - measured) <= 0.1 * measured, (printed, measured, text)
    assert 5 <= printed <= process_seconds
    # The whole process (Python's start and the imports too) is longer than the training, and no longer than it ran.
    assert printed < float(PROCESS.search(summary).group(1)) <= process_seconds, summary
    result = json.loads((out / "result.json").read_text())
    assert result["wall_seconds"] == pytest.approx(printed, abs=0.01)
    assert f"env_steps={result['total_env_steps']:,} " in summary
    assert result["stopped_by"] == "the time limit (5 s) passed during its last iteration"
    assert result["env_settings"]["repeat_action_probability"] == 0.25  # ALE/...-v5 as gymnasium defines it
    # The host during the run: printed, and kept with its verdict.
    [(_, host_line)] = arrived(lines, "ppo_bench: host during the run: ")
    assert "1-minute load " in host_line and host_line.endswith((": quiet", ")")), host_line
    assert isinstance(result["host"]["busy"], bool) and result["host"]["cores"] >= 1


def test_a_cartpole_run_under_a_pipe_shows_progress_at_a_steady_cadence(tmp_path):
    """The issue's `python -m ppo_bench ... | tee train.log`: a 20 s CartPole run whose lines all came at the end.
    Now its first progress line comes at least 10 s before its last, and none waits much beyond the interval."""
    interval = 2.0
    code, lines, _ = run_timed(
        ["--env-id", "CartPole-v1", "--time-limit", "20", "--total-timesteps", "100000000", "--threads", "1"]
        + ["--checkpoint-every", "0", "--progress-interval", str(interval), "--out-dir", str(tmp_path / "cartpole")]
    )
    text = "\n".join(line for _, line in lines)
    assert code == 0, text
    times = [t for t, _ in arrived(lines, "ppo_bench: step ")]
    assert len(times) >= 5, text
    assert times[-1] - times[0] >= 10, text
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert max(gaps) <= 2.5 * interval, (gaps, text)
