"""The smoke checks' decision rules, fed given values (no torch, no GPU needed)."""

from __future__ import annotations

import json

import pytest

from common import rules as common_rules
from smoke import rules
from smoke.expect import UsageError, load_expect, validate_expect
from smoke.facts import parse_proc_driver_version

pytestmark = pytest.mark.unit

PINS = {
    "variant": "cu128",
    "torch": "3.4.1",
    "torchvision": "0.39.4",
    "torchaudio": "3.4.1",
    "cuda": "12.8",
    "cudnn": 99001,
    "nccl": "2.99.3",
    "python": "3.11",
    "min_driver": "515.43.04",
}
IMAGE_FACTS = {
    "torch": "3.4.1+cu128",
    "torchvision": "0.39.4+cu128",
    "torchaudio": "3.4.1+cu128",
    "cuda": "12.8",
    "cudnn": 99001,
    "nccl": "2.99.3",
    "python": "3.11.90",
}


def failing(comparisons):
    return {c.what for c in comparisons if not c.ok}


# --------------------------------------------------------------------------- versions


def test_versions_match_with_local_suffixes():
    assert failing(rules.compare_versions(PINS, IMAGE_FACTS)) == set()


@pytest.mark.parametrize(
    "key, value",
    [
        ("torch", "3.4.0+cu128"),
        ("torchvision", "0.39.3"),
        ("torchaudio", "3.3.0"),
        ("cuda", "12.6"),
        ("cudnn", 98003),
        ("nccl", "2.98.1"),
        ("python", "3.12.1"),
    ],
)
def test_each_mismatch_is_named(key, value):
    comparisons = rules.compare_versions(PINS, {**IMAGE_FACTS, key: value})
    assert failing(comparisons) == {key}
    bad = next(c for c in comparisons if not c.ok)
    assert "expected" in bad.describe() and str(PINS[key]) in bad.describe()


def test_cpu_only_torch_fails_a_cuda_expectation():
    cpu_facts = {**IMAGE_FACTS, "torch": "3.4.1+cpu", "cuda": None, "cudnn": None, "nccl": None}
    assert failing(rules.compare_versions(PINS, cpu_facts)) == {"cuda", "cudnn", "nccl"}
    msg = next(c for c in rules.compare_versions(PINS, cpu_facts) if c.what == "cuda").describe()
    assert msg == "cuda: expected 12.8, found absent"


def test_null_pin_means_absent():
    expect = {**PINS, "cuda": None, "cudnn": None, "nccl": None, "torchvision": None}
    facts = {**IMAGE_FACTS, "cuda": None, "cudnn": None, "nccl": None, "torchvision": None}
    assert failing(rules.compare_versions(expect, facts)) == set()
    # ...and a CUDA build is not what a CPU-only expectation asked for
    assert failing(rules.compare_versions(expect, IMAGE_FACTS)) == {"cuda", "cudnn", "nccl", "torchvision"}


def test_release_and_version_helpers():
    assert rules.release("3.4.1+cu128") == "3.4.1"
    assert rules.release(None) is None
    assert rules.version_tuple("12.8.93") == (12, 8, 93)
    assert rules.version_tuple("3.4.1rc1") == (3, 4, 1)
    assert rules.version_cmp("515.43.04", "515.43.04") == 0
    assert rules.version_cmp("470.82.01", "515.43.04") == -1
    assert rules.version_cmp("12.8", "12.8.0") == 0
    assert rules.cudnn_str(99001) == "9.90.1"
    assert rules.cudnn_str(8902) == "8.9.2"
    assert rules.cudnn_str(None) is None


@pytest.mark.parametrize(
    "runtime, compiled, ok",
    [
        ((9, 10, 2), (9, 10, 2), True),
        ((9, 11, 0), (9, 10, 2), True),
        ((9, 8, 0), (9, 10, 2), False),
        ((8, 9, 7), (9, 1, 0), False),
        (None, (9, 1, 0), True),
    ],
)
def test_cudnn_runtime_vs_compiled(runtime, compiled, ok):
    problem = rules.cudnn_runtime_vs_compiled(runtime, compiled)
    assert (problem is None) is ok
    if not ok:
        assert "LD_LIBRARY_PATH" in problem


# --------------------------------------------------------------------------- requirements

LINUX_X86 = {
    **rules.default_environment(),
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "sys_platform": "linux",
    "python_version": "3.11",
}
TORCH_REQUIRES = [
    "filelock",
    "typing-extensions>=4.10.0",
    'nvidia-cuda-nvrtc-cu12==12.8.93; platform_system == "Linux" and platform_machine == "x86_64"',
    'nvidia-cudnn-cu12==9.10.2.21; platform_system == "Linux" and platform_machine == "x86_64"',
    'nvidia-nccl-cu12==2.99.3; platform_system == "Linux" and platform_machine == "x86_64"',
    'triton==3.5.1; platform_system == "Linux" and platform_machine == "x86_64"',
    'nvidia-only-on-arm==1.0; platform_machine == "aarch64"',
    'optree>=0.13.0; extra == "optree"',
]
INSTALLED = {
    "nvidia-cuda-nvrtc-cu12": "12.8.93",
    "nvidia-cudnn-cu12": "9.10.2.21",
    "nvidia-nccl-cu12": "2.99.3",
    "triton": "3.5.1",
}


def test_requirements_satisfied_and_foreign_platforms_ignored():
    ok, problems = rules.check_requirements(TORCH_REQUIRES, INSTALLED, LINUX_X86)
    assert problems == []
    assert sorted(ok) == sorted(f"{k}=={v}" for k, v in INSTALLED.items())


def test_requirement_wrong_version_and_missing_wheel():
    installed = {**INSTALLED, "nvidia-cudnn-cu12": "9.1.0.70"}
    del installed["nvidia-nccl-cu12"]
    _, problems = rules.check_requirements(TORCH_REQUIRES, installed, LINUX_X86)
    assert any("nvidia-cudnn-cu12 9.1.0.70 installed, torch requires ==9.10.2.21" in p for p in problems)
    assert any(p.startswith("nvidia-nccl-cu12 is required by torch") for p in problems)
    assert len(problems) == 2


def test_requirements_on_another_platform_are_skipped():
    mac = {**LINUX_X86, "platform_system": "Darwin", "platform_machine": "arm64"}
    assert rules.check_requirements(TORCH_REQUIRES, {}, mac) == ([], [])


@pytest.mark.parametrize(
    ("line", "version", "ok"),
    [
        ('Nvidia_CUDNN.cu12 >=9.1, <10 ; (platform_system == "Linux")', "9.10.2.21", True),  # name normalized, parens
        ("nvidia-cudnn-cu12 (>=9.1,<10)", "10.0.1", False),  # the old parenthesized form
        ("nvidia-nccl-cu12==2.99.*", "2.99.3", True),
        ("nvidia-nccl-cu12==2.99.*", "3.0.0", False),
        ("nvidia-nvjitlink-cu12~=12.2.1", "12.2.3", True),
        ("nvidia-nvjitlink-cu12~=12.2.1", "12.3.0", False),
        ("nvidia-cufft-cu12!=1.0.0", "1.0", False),
        ('triton==3.5.1; platform_machine == "aarch64" or (sys_platform == "linux" and python_version >= "3.10")', "3.5.1", True),
        ('nvidia-x==1.0; python_version < "3.10"', None, True),  # not for this Python: skipped
    ],
)
def test_requirement_forms_read_by_packaging(line, version, ok):
    names = ("nvidia-cudnn-cu12", "nvidia-nccl-cu12", "nvidia-nvjitlink-cu12", "nvidia-cufft-cu12", "triton")
    installed = dict.fromkeys(names, version)
    good, problems = rules.check_requirements([line], installed, LINUX_X86)
    assert (problems == []) is ok, problems
    assert bool(good) is (ok and version is not None)


def test_an_unreadable_requirement_is_a_problem_not_a_skip():
    _, problems = rules.check_requirements(["nvidia-x ?? 1"], {}, LINUX_X86)
    assert len(problems) == 1 and problems[0].startswith("cannot read torch's requirement 'nvidia-x ?? 1'")


# --------------------------------------------------------------------------- arch list

ARCH_UP_TO_90 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]


@pytest.mark.parametrize(
    "capability, arch_list, ok",
    [
        ((9, 0), ARCH_UP_TO_90, True),
        ((8, 9), ARCH_UP_TO_90, True),  # sm_86 cubin runs on 8.9 (same major, newer minor)
        ((12, 0), ARCH_UP_TO_90, False),  # Blackwell on a build without sm_120
        ((10, 0), ARCH_UP_TO_90, False),
        ((12, 0), ARCH_UP_TO_90 + ["sm_100", "sm_120"], True),
        ((12, 0), ARCH_UP_TO_90 + ["compute_90"], True),  # PTX JIT to any newer GPU
        ((8, 0), ["sm_86", "compute_90"], False),  # neither cubin nor PTX is old enough
        ((9, 0), ["sm_90a"], True),
        ((10, 0), ["sm_90a", "sm_100a"], True),
        ((10, 3), ["sm_100a"], False),  # arch-specific cubins run only on their exact GPU
        ((3, 7), ARCH_UP_TO_90, False),
        ((9, 0), [], False),
    ],
)
def test_arch_supported(capability, arch_list, ok):
    assert rules.arch_supported(capability, arch_list) is ok


def test_arch_problem_names_the_error_and_the_remedy():
    problems = rules.arch_problems([("NVIDIA H100", (9, 0)), ("NVIDIA RTX PRO 6000", (12, 0))], ARCH_UP_TO_90)
    assert len(problems) == 1
    msg = problems[0]
    assert "GPU 1 NVIDIA RTX PRO 6000 is sm_120" in msg
    assert "no kernel image is available for execution on the device" in msg
    assert "newer CUDA line" in msg and "sm_90" in msg


# --------------------------------------------------------------------------- driver

# Made-up floors (not the matrix's, not NVIDIA's): ordered 11.8 < 12.x < 13.0 as the real ones are.
LINES = {"11.8": "445.11.09", "12.1": "515.43.04", "12.8": "515.43.04", "13.0": "600.11.02"}


def test_driver_new_enough():
    verdict = rules.driver_status("535.104.05", "515.43.04", "12.8")
    assert verdict.status == "pass"
    assert "535.104.05 >= 515.43.04" in verdict.message


def test_driver_equal_to_minimum_passes():
    assert rules.driver_status("515.43.04", "515.43.04", "12.8").status == "pass"


def test_driver_too_old_suggests_older_line():
    verdict = rules.driver_status("470.82.01", "515.43.04", "12.8", LINES)
    assert verdict.status == "fail"
    assert "470.82.01 is older than 515.43.04" in verdict.message
    assert "CUDA 12.8" in verdict.message
    assert "use the CUDA 11.8 variant (needs driver >= 445.11.09)" in verdict.message


def test_driver_too_old_for_cuda13_suggests_newest_line_that_fits():
    verdict = rules.driver_status("550.54.15", "600.11.02", "13.0", LINES)
    assert verdict.status == "fail"
    assert "use the CUDA 12.8 variant" in verdict.message


def test_driver_too_old_without_table_gives_generic_advice():
    verdict = rules.driver_status("418.67", "445.11.09", "11.8")
    assert verdict.status == "fail"
    assert "update the host driver to >= 445.11.09" in verdict.message
    assert "older CUDA line" in verdict.message


def test_no_driver_is_missing_with_hint():
    verdict = rules.driver_status(None, "515.43.04", "12.8")
    assert verdict.status == "missing"
    assert "--gpus all" in verdict.message


def test_unreadable_driver_and_no_minimum():
    assert rules.driver_status("garbage", "515.43.04", "12.8").status == "fail"
    assert rules.driver_status("535.104.05", None, "12.8").status == "pass"


def test_proc_driver_version_parsing():
    text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\nGCC version:  gcc 12\n"
    assert parse_proc_driver_version(text) == "535.104.05"
    open_text = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  (dvs-builder@U16)\n"
    assert parse_proc_driver_version(open_text) == "570.86.15"
    assert parse_proc_driver_version("nothing here") is None


# --------------------------------------------------------------------------- shm


def test_shm_docker_default_warns_with_remedies():
    warning = rules.shm_advice(64 * rules.MIB)
    assert warning and "--ipc=host" in warning and "--shm-size" in warning and "64 MiB" in warning
    assert rules.shm_advice(32 * rules.MIB)
    assert rules.shm_advice(None)


def test_shm_large_enough_is_quiet():
    assert rules.shm_advice(64 * rules.MIB + 4096) is None
    assert rules.shm_advice(8 * 1024 * rules.MIB) is None


# --------------------------------------------------------------------------- expectations


def test_expect_json_and_file(tmp_path):
    assert load_expect(json.dumps(PINS))["cudnn"] == 99001
    path = tmp_path / "e.json"
    path.write_text(json.dumps(PINS))
    parsed = load_expect(f"@{path}")
    assert parsed["variant"] == "cu128" and parsed == load_expect(json.dumps(PINS))


@pytest.mark.parametrize(
    "data, fragment",
    [
        ([1, 2], "must be a JSON object"),
        ({**PINS, "cudaa": "12.8"}, "unknown key(s) cudaa"),
        ({k: v for k, v in PINS.items() if k != "cuda"}, "missing cuda"),
        ({**PINS, "cudnn": "99001"}, "cudnn must be int"),
        ({**PINS, "cudnn": True}, "cudnn must be int"),
        ({**PINS, "torch": None}, "torch must not be null"),
        ({**PINS, "require_gpu": True}, "unknown key(s) require_gpu"),
        ({**PINS, "driver_lines": {"12.8": 525}}, "driver_lines must map"),
    ],
)
def test_bad_expectations_are_usage_errors(data, fragment):
    with pytest.raises(UsageError, match=None) as info:
        validate_expect(data)
    assert fragment in str(info.value)


def test_bad_json_and_missing_file(tmp_path):
    with pytest.raises(UsageError, match="not valid JSON"):
        load_expect("{nope")
    with pytest.raises(UsageError, match="cannot read"):
        load_expect(f"@{tmp_path / 'absent.json'}")


# --------------------------------------------------------------------------- advisories

SECTION = {
    "as_of": "2026-07-23",
    "summary": "2 high (high and critical accepted)",
    "carried": [
        {
            "id": "PYSEC-2026-139",
            "severity": "HIGH",
            "accepted": True,
            "package": "torch",
            "version": "3.4.1",
            "fixed": "3.6.0",
            "affects": "pt2",
        },
        {
            "id": "PYSEC-2026-2286",
            "severity": "HIGH",
            "accepted": True,
            "package": "torch",
            "version": "3.4.1",
            "fixed": "3.5.0",
            "affects": "torch.load",
        },
    ],
}


def test_advisory_summary_names_them_and_says_the_data_is_stale():
    import datetime as dt

    line = common_rules.advisory_summary(SECTION, dt.date(2026, 12, 3))
    assert line.startswith(
        "Advisories: 2 high (high and critical accepted): torch PYSEC-2026-139, PYSEC-2026-2286 "
        "(PyPA data of 2026-07-23, 133 days old: stale, so advisories published since are not listed; "
        "a newer image carries newer data)"
    )
    assert "only from sources you trust" in line
    fresh = common_rules.advisory_summary(SECTION, dt.date(2026, 8, 1))
    assert "(PyPA data of 2026-07-23, 9 days old);" in fresh and "stale" not in fresh


def test_the_stale_line_speaks_to_the_images_user_not_its_builder():
    """What `proof` printed before: 'a pass on it is not a pass; whoever builds the image refreshes it (build.py ...)'."""
    import datetime as dt

    line = common_rules.advisory_summary(SECTION, dt.date(2026, 12, 3))
    assert "build.py" not in line and "a pass on it is not a pass" not in line and "rebuild" not in line


@pytest.mark.parametrize(("as_of", "stale"), [("2026-09-04", False), ("2026-09-03", True), (None, True)])
def test_ninety_days_is_the_last_fresh_day(as_of, stale):
    import datetime as dt

    assert common_rules.advisory_age(as_of, dt.date(2026, 12, 3)).endswith("a newer image carries newer data") is stale


def test_the_proof_age_limit_is_the_stale_data_rule():
    """verify --max-age's default and the advisory data's stale age are one number."""
    import build

    assert build.DEFAULT_MAX_AGE == common_rules.STALE_AFTER_DAYS
    assert build.make_parser()[0].parse_args(["verify", "r:t", "--key", "k"]).max_age == common_rules.STALE_AFTER_DAYS


def test_a_critical_advisory_says_never_load_untrusted_checkpoints():
    import datetime as dt

    critical = {**SECTION, "carried": [{**SECTION["carried"][0], "severity": "CRITICAL"}]}
    assert "CRITICAL: never load a checkpoint you did not make" in common_rules.advisory_summary(critical, dt.date(2026, 8, 1))


def test_no_advisories_and_no_record():
    import datetime as dt

    assert common_rules.advisory_summary(
        {"as_of": "2026-07-23", "summary": "none known", "carried": []}, dt.date(2026, 8, 1)
    ) == ("Advisories: none known (PyPA data of 2026-07-23, 9 days old)")
    assert common_rules.advisory_summary(None, dt.date(2026, 8, 1)) == "Advisories: not recorded in this image"
    assert common_rules.advisory_details(SECTION)[1].startswith(
        "  PYSEC-2026-2286 (HIGH, accepted) torch 3.4.1, fixed: 3.5.0: torch.load"
    )


def test_medium_and_low_rows_are_reported_grouped_by_package_and_need_no_acceptance():
    import datetime as dt

    medium = {
        "id": "PYSEC-9",
        "severity": "MEDIUM",
        "accepted": False,
        "package": "setuptools",
        "version": "1.0",
        "fixed": "no fix stated",
        "summary": "path traversal",
    }
    section = {**SECTION, "summary": "2 high, 1 medium (high and critical accepted)", "carried": [*SECTION["carried"], medium]}
    assert common_rules.carried_text(section).endswith(": torch PYSEC-2026-139, PYSEC-2026-2286; setuptools PYSEC-9")
    assert (
        common_rules.advisory_details(section)[2]
        == "  PYSEC-9 (MEDIUM, reported) setuptools 1.0, fixed: no fix stated: path traversal"
    )
    only_medium = {**section, "summary": "1 medium", "carried": [medium]}
    assert "sources you trust" not in common_rules.advisory_summary(only_medium, dt.date(2026, 8, 1))


# --- NCCL's inter-node transports (start-up report) ------------------------------------

RDMA_OK = {"devices": ["mlx5_0", "mlx5_1"], "uverbs": ["uverbs0", "uverbs1"], "libibverbs": True, "memlock": None}


@pytest.mark.parametrize(
    ("change", "expected", "warns"),
    [
        ({}, "NCCL transports: InfiniBand/RoCE (mlx5_0, mlx5_1) and TCP sockets", False),
        ({"libibverbs": False}, "TCP sockets only (libibverbs is not in this image)", False),
        ({"ib_disable": "1"}, "TCP sockets (InfiniBand/RoCE switched off by NCCL_IB_DISABLE=1)", False),
        ({"devices": [], "uverbs": []}, "TCP sockets; no InfiniBand/RoCE device visible", False),
        ({"uverbs": []}, "/dev/infiniband is not passed in, so NCCL falls back to TCP: start the container with --device", True),
        ({"memlock": 64 * 1024}, "the memlock limit is 64 KiB, too small", True),
        ({"ib_disable": "0", "memlock": 2 << 30}, "NCCL transports: InfiniBand/RoCE (mlx5_0, mlx5_1) and TCP sockets", False),
    ],
)
def test_nccl_transports_say_what_nccl_can_use_and_what_to_change(change, expected, warns):
    line = rules.nccl_transports({**RDMA_OK, **change})
    assert line.startswith("NCCL transports: ") and expected in line
    assert ("WARNING" in line) == warns


def test_rdma_facts_read_sysfs_and_device_nodes(tmp_path):
    from smoke import facts

    (tmp_path / "sys" / "mlx5_0").mkdir(parents=True)
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "uverbs0").touch()
    (tmp_path / "dev" / "rdma_cm").touch()
    found = facts.rdma_facts(tmp_path / "sys", tmp_path / "dev")
    assert (found["devices"], found["uverbs"]) == (["mlx5_0"], ["uverbs0"])
    assert facts.rdma_facts(tmp_path / "none", tmp_path / "none")["devices"] == []
