"""ppo_bench's lines say what happened: why a run stopped (its real step count when --total-timesteps is
no whole number of rollouts), what its time measures, and the threads the busy rule judges it on."""

from __future__ import annotations

import re
import time

import pytest
import torch

from ppo_bench import __main__ as cli
from ppo_bench.config import Args
from ppo_bench.outputs import stopped_by
from ppo_bench.ppo import run_threads

pytestmark = pytest.mark.unit


def ended(total: int, batch: int) -> str:
    iterations = max(1, total // batch)
    return stopped_by(Args(total_timesteps=total), False, False, False, iterations, iterations, batch)


def test_a_total_of_whole_rollouts_is_said_as_it_is():
    assert ended(2_048_000, 2048) == "all 2,048,000 steps (--total-timesteps) done"


def test_a_total_that_is_no_whole_number_of_rollouts_says_the_real_count():
    """The issue's run: 2,000,000 asked, 1,998,848 trained (976 rollouts of 2,048)."""
    assert ended(2_000_000, 2048) == (
        "all 976 iterations done: 1,998,848 steps, --total-timesteps 2,000,000 in whole rollouts of 2,048 steps"
    )
    assert ended(1000, 2048).startswith("all 1 iteration done: 2,048 steps")


RESULT = {"solved": True, "final_mean_return": 500.0, "steps_to_target": 180224, "seconds_to_target": 3.4,
          "total_env_steps": 180224, "wall_seconds": 3.404, "sps_end_to_end": 52964.2, "device": "cpu"}  # fmt: skip


def test_the_summary_names_the_training_time_and_the_process_time():
    line = cli.summary_line(RESULT, "/out", 5.43)
    assert " training=3.40s process=5.43s " in line and " wall=" not in line
    assert " process=" not in cli.summary_line(RESULT, "/out", None)  # no /proc: not guessed


def test_the_process_time_counts_from_this_processs_start():
    """This test's process started before the test did, and long before now minus nothing."""
    before = cli.process_seconds()
    time.sleep(0.05)
    after = cli.process_seconds()
    assert before is not None and after is not None and after - before >= 0.04 and before > 0.05


@pytest.mark.parametrize(("backend", "expected"), [("torch", True), ("gymnasium", True), ("atari", False)])
def test_the_busy_rule_gets_torchs_threads_except_for_ales_own(backend, expected, monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert (run_threads(backend) == torch.get_num_threads()) is expected
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert run_threads("torch") == 2 * torch.get_num_threads()


def test_the_summary_keeps_its_keys_in_order():
    keys = re.findall(r" (\w+)=", cli.summary_line(RESULT, "/out", 1.0))
    assert keys == ["solved", "final_mean_return", "steps_to_target", "seconds_to_target", "env_steps", "training",
                    "process", "sps", "device"]  # fmt: skip
