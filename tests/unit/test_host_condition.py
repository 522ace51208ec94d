"""common.host: the one rule for a busy host, fed readings of a busy and a quiet one, and the words
every printed speed ratio uses."""

from __future__ import annotations

import time

import pytest

from common import host
from common.host import CpuSample, HostCondition, busy_reasons, condition_text, host_condition, speed_words

pytestmark = pytest.mark.unit


def sample(at: float, busy: float | None, own: float, steal: float | None = 0.0, load1: float = 0.5, throttled=None):
    return CpuSample(at=at, load1=load1, busy=busy, steal=steal, own=own, throttled=throttled)


def condition(**fields) -> HostCondition:
    base = dict(
        cpus=2,
        cores=2,
        wall_seconds=20.0,
        load1_start=0.3,
        load1_end=2.1,
        own_cores=1.9,
        others_cores=0.05,
        steal_share=0.0,
        throttled_share=None,
    )
    return HostCondition(**{**base, **fields})


def test_a_quiet_host_is_quiet():
    quiet = host_condition(sample(0, 100.0, 10.0, load1=0.4), sample(20, 139.0, 48.0, load1=2.0), cpus=2, cores=2)
    assert quiet.own_cores == pytest.approx(1.9) and quiet.others_cores == pytest.approx(0.05)
    assert busy_reasons(quiet) == []
    assert condition_text(quiet).endswith(": quiet")


def test_a_host_whose_other_work_took_a_core_is_busy():
    """The issue's run: another job on a 2-core host (load 4) while the benchmark ran."""
    busy = host_condition(sample(0, 100.0, 10.0, load1=4.0), sample(20, 139.0, 26.0, load1=4.1), cpus=2, cores=2)
    assert busy.others_cores == pytest.approx(1.15)
    assert busy_reasons(busy) == ["other work took 1.15 of the 2 CPUs, leaving the run 0.85 of its 2 cores"]
    assert ": BUSY (other work took 1.15 of the 2 CPUs" in condition_text(busy)


def test_steal_counts_as_other_work():
    """A VM whose hypervisor gave a third of its CPUs' time to other machines."""
    stolen = host_condition(sample(0, 100.0, 10.0, steal=5.0), sample(10, 113.0, 23.0, steal=12.0), cpus=2, cores=2)
    assert stolen.steal_share == pytest.approx(0.35) and stolen.others_cores == pytest.approx(0.7)
    assert busy_reasons(stolen)


def test_the_load_average_stands_in_where_proc_stat_cannot_be_read():
    busy = condition(others_cores=None, steal_share=None, load1_start=3.6, load1_end=3.9, own_cores=1.0)
    quiet = condition(others_cores=None, steal_share=None, load1_start=0.2, load1_end=2.2, own_cores=1.9)
    assert busy_reasons(busy) == [
        "the 1-minute load average, 3.90 less the run's own 1.00, on 2 CPUs, leaving the run 0.00 of its 2 cores"
    ]
    assert busy_reasons(quiet) == []


def test_the_threshold_is_three_quarters_of_the_cores_to_itself():
    assert busy_reasons(condition(others_cores=0.49)) == []  # 1.51 of 2 cores left
    assert busy_reasons(condition(others_cores=0.51))  # 1.49 left


def test_other_work_beside_a_quota_counts_only_where_it_leaves_the_run_short():
    """docker --cpus 2 on a 16-CPU host: 4 CPUs of other work still leave the run its 2 cores."""
    assert busy_reasons(condition(cpus=16, cores=2, others_cores=4.0)) == []
    assert busy_reasons(condition(cpus=16, cores=2, others_cores=14.8))


def test_a_throttling_quota_makes_the_run_busy():
    assert busy_reasons(condition(throttled_share=0.25)) == ["the cgroup's CPU quota held it back 25% of the time"]
    assert busy_reasons(condition(throttled_share=0.02)) == []


def test_the_verdict_travels_in_result_json_and_back():
    record = condition(others_cores=1.2).to_json()
    assert record["busy"] is True and record["busy_reasons"]
    assert HostCondition.from_json(record) == condition(others_cores=1.2)


def test_this_machine_can_be_read():
    start = host.cpu_sample()
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:  # a little CPU work of our own
        pass
    measured = host_condition(start, host.cpu_sample())
    assert measured.cores >= 1 and measured.cpus >= measured.cores
    assert 0.5 < measured.own_cores <= measured.cpus + 0.5
    assert measured.load1_start is not None and measured.others_cores is not None  # Linux: /proc is there


@pytest.mark.parametrize(
    ("ratio", "lower_is_better", "words"),
    [
        (0.62, False, "1.61x slower"),  # steps/s below the reference
        (1.62, True, "1.62x slower"),  # seconds to target above it: the same direction, the same word
        (2.1, False, "2.10x faster"),
        (0.5, True, "2.00x faster"),
        (1.001, False, "1.00x: the same within 5%"),
        (1.9 / 1.86, True, "1.02x slower: the same within 5%"),  # the 1.9 vs 1.9 s to target
        (1.049, False, "1.05x faster: the same within 5%"),
        (1.06, False, "1.06x faster"),  # beyond 5%: a difference
        (0.0, False, "no ratio"),
    ],
)
def test_every_ratio_says_faster_or_slower_or_the_same(ratio, lower_is_better, words):
    assert speed_words(ratio, lower_is_better) == words


def test_a_one_thread_run_is_judged_on_the_one_core_it_uses():
    """The issue's run: one thread, 0.98 of a core used, other work 1.00 of 2 CPUs: it had its core."""
    one = condition(own_cores=0.98, others_cores=1.0, threads=1)
    assert busy_reasons(one) == [] and condition_text(one).startswith("2 cores, 1 thread used;")
    assert busy_reasons(condition(own_cores=0.98, others_cores=1.0)) != []  # as many threads as cores: busy
    assert busy_reasons(condition(own_cores=0.6, others_cores=1.4, threads=1)) == [
        "other work took 1.40 of the 2 CPUs, leaving the run 0.60 of the 1 core it uses (1 thread)"
    ]


def test_more_threads_than_cores_are_judged_on_the_cores():
    assert condition(threads=8).uses == 2 and busy_reasons(condition(threads=8, others_cores=0.6))
