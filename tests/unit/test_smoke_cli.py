"""`python -m smoke` and `python -m smoke.startup` through the user's path: a subprocess."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from smoke import checks, facts, startup
from smoke.expect import expect_from_facts

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
GPU_CHECKS = ("driver", "gpu", "cudnn", "amp")
FACT_KEYS = {
    "torch",
    "torch_release",
    "cuda",
    "cudnn",
    "nccl",
    "python",
    "torchvision",
    "torchaudio",
    "gpu_count",
    "gpus",
    "driver",
    "shm_bytes",
}
CHECK_KEYS = {"name", "status", "detail", "seconds", "required"}


@pytest.fixture(scope="module")
def host_expect() -> str:
    return json.dumps(expect_from_facts(facts.collect(torch), variant="host"))


def smoke(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "smoke", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def full_run(host_expect, tmp_path_factory):
    """The whole suite on this host, read line by line as it streams."""
    out = tmp_path_factory.mktemp("smoke") / "result.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "smoke", "--expect", host_expect, "--json-out", str(out)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines, running_at_first_row = [], None
    deadline = time.monotonic() + 300
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if running_at_first_row is None and line.startswith("versions "):
                running_at_first_row = proc.poll() is None
            assert time.monotonic() < deadline, "smoke ran past 300 s"
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return {
        "rc": proc.returncode,
        "lines": lines,
        "stderr": proc.stderr.read(),
        "json": json.loads(out.read_text()),
        "streamed": running_at_first_row,
    }


@pytest.mark.process
def test_full_run_passes_on_host_without_require_gpu(full_run):
    assert full_run["rc"] == 0, "\n".join(full_run["lines"]) + full_run["stderr"]
    assert full_run["lines"][-1].startswith("smoke: OK")


def test_rows_stream_while_the_suite_still_runs(full_run):
    assert full_run["streamed"] is True


def test_one_row_per_check_then_summary(full_run):
    rows = [line.split()[0] for line in full_run["lines"] if line.split() and line.split()[0] in checks.NAMES]
    assert rows == list(checks.NAMES)
    header = next(i for i, line in enumerate(full_run["lines"]) if line.startswith("CHECK"))
    assert header < full_run["lines"].index(next(line for line in full_run["lines"] if line.startswith("versions ")))


def test_json_schema(full_run):
    result = full_run["json"]
    assert result["ok"] is True and result["complete"] is True and result["require_gpu"] is False
    assert result["expect"]["variant"] == "host"
    assert FACT_KEYS <= set(result["facts"])
    assert [c["name"] for c in result["checks"]] == list(checks.NAMES)
    for record in result["checks"]:
        assert set(record) >= CHECK_KEYS
        assert record["status"] in ("pass", "fail", "skip")
        assert isinstance(record["seconds"], float) and record["detail"]


def test_json_facts_feed_the_image_tags(full_run):
    f = full_run["json"]["facts"]
    assert f["torch"] == torch.__version__
    assert f["torch_release"] == torch.__version__.split("+")[0]
    assert f["cuda"] == torch.version.cuda
    assert f["python"].startswith(f"{sys.version_info.major}.{sys.version_info.minor}.")
    assert f["gpu_count"] == torch.cuda.device_count() == len(f["gpus"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="the behaviour of a host without a GPU; the gpu group covers GPU hosts")
def test_gpu_checks_skipped_with_reason_and_cpu_checks_ran(full_run):
    by_name = {c["name"]: c for c in full_run["json"]["checks"]}
    for name in GPU_CHECKS:
        assert by_name[name]["status"] == "skip", by_name[name]
        assert by_name[name]["required"] is False and by_name[name]["detail"]
    for name in ("versions", "amp_cpu", "shm", "distributed", "compile"):
        assert by_name[name]["status"] == "pass", by_name[name]
        assert by_name[name]["required"] is True
    assert "gloo" in by_name["distributed"]["detail"]
    assert by_name["compile"]["detail"].startswith("cpu")


@pytest.mark.process
@pytest.mark.skipif(torch.cuda.is_available(), reason="the behaviour of a host without a GPU; the gpu group covers GPU hosts")
def test_require_gpu_fails_on_a_host_without_gpu(host_expect, tmp_path):
    out = tmp_path / "r.json"
    done = smoke(
        "--expect", host_expect, "--require-gpu", "--json-out", str(out), "--only", "versions,driver,gpu,cudnn,amp,distributed"
    )
    assert done.returncode == 1, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["ok"] is False and result["require_gpu"] is True
    by_name = {c["name"]: c for c in result["checks"]}
    assert by_name["versions"]["status"] == "pass"
    for name in (*GPU_CHECKS, "distributed"):
        assert by_name[name]["status"] == "fail" and by_name[name]["required"] is True
        assert by_name[name]["detail"]
    assert "smoke: FAILED" in done.stdout and "gpu" in done.stdout.splitlines()[-1]


def test_require_gpu_is_a_flag_not_an_expectation(host_expect):
    expect = {**json.loads(host_expect), "require_gpu": True}
    done = smoke("--expect", json.dumps(expect), "--only", "gpu")
    assert done.returncode == 2 and "unknown key(s) require_gpu" in done.stderr


@pytest.mark.process
def test_expect_from_a_file_and_a_wrong_pin_fails(host_expect, tmp_path):
    path = tmp_path / "expect.json"
    path.write_text(json.dumps({**json.loads(host_expect), "torch": "1.0.0"}))
    done = smoke("--expect", f"@{path}", "--only", "versions")
    assert done.returncode == 1
    assert "torch: expected 1.0.0" in done.stdout
    path.write_text(host_expect)
    assert smoke("--expect", f"@{path}", "--only", "versions").returncode == 0


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--expect", "{not json"], "not valid JSON"),
        (["--expect", '{"torch": "3.4.1"}'], "missing"),
        (["--expect", "@/nonexistent/expect.json"], "cannot read"),
        ([], "--expect"),
        (["--expect", "HOST", "--only", "versions,bogus"], "unknown check(s) bogus"),
        (["--expect", "HOST", "--json-out", "/proc/nope/r.json"], "--json-out"),
        (["--expect", "HOST", "--frobnicate"], "unrecognized arguments"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(host_expect, args, fragment):
    done = smoke(*[host_expect if a == "HOST" else a for a in args], timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("smoke: error:") and fragment in lines[0]


# --------------------------------------------------------------------------- startup


# The start-up report prints, then asks which heavy modules it imported: none (what keeps it fast; a timed
# assertion would say the same less surely on a busy host).
STARTUP_PROBE = """
import sys
from smoke import startup
code = startup.main()
print("IMPORTED", sorted(m for m in ("torch", "numpy", "gymnasium") if m in sys.modules))
sys.exit(code)
"""


def test_startup_is_informational_and_imports_no_torch():
    done = subprocess.run([sys.executable, "-c", STARTUP_PROBE], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "IMPORTED []"
    lines = done.stdout.strip().splitlines()[:-1]
    assert 2 <= len(lines) <= 6
    assert torch.__version__ in lines[0]
    assert "--gpus all" in done.stdout  # no GPU here
    assert "/dev/shm" in done.stdout


def test_startup_report_with_given_machines(monkeypatch):
    monkeypatch.setenv("PROVEN_TORCH_VARIANT", "cu128")
    nvml = {"driver": "470.82.01", "gpus": [{"name": "NVIDIA A100-SXM4-80GB", "memory_gb": 79.2}]}
    lines = startup.report("515.43.04", nvml, None, 64 * 1024 * 1024, ("3.4.1", "12.8"))
    text = "\n".join(lines)
    assert lines[0].startswith("proven-torch cu128: torch 3.4.1, CUDA 12.8")
    assert "GPUs: 1: NVIDIA A100-SXM4-80GB (79.2 GB)" in text
    assert "Driver: WARNING: host NVIDIA driver 470.82.01 is older than 515.43.04" in text
    assert "--ipc=host" in text and "--shm-size" in text
    assert "--gpus all" not in text

    fine = "\n".join(startup.report("515.43.04", None, "535.104.05", 16 * 2**30, ("3.4.1", "12.8")))
    assert "Driver: driver 535.104.05 >= 515.43.04" in fine and "WARNING" not in fine


def test_startup_reads_min_driver_from_the_spec_and_never_fails(monkeypatch, tmp_path):
    spec = tmp_path / "expect.json"
    spec.write_text(json.dumps({"expect": {"min_driver": "515.43.04"}, "ppo_gate": {}}))
    monkeypatch.setenv("PROVEN_TORCH_SPEC", str(spec))
    monkeypatch.setattr(startup.facts, "nvml_info", lambda: {"driver": "470.82.01", "gpus": []})
    buf = io.StringIO()
    assert startup.main([], out=buf) == 0
    assert "older than 515.43.04" in buf.getvalue()

    def boom():
        raise RuntimeError("NVML exploded")

    monkeypatch.setattr(startup.facts, "nvml_info", boom)
    buf = io.StringIO()
    assert startup.main([], out=buf) == 0
    assert "unavailable" in buf.getvalue() and "NVML exploded" in buf.getvalue()
    assert startup.main(["--min-driver"], out=io.StringIO()) == 0  # even a bad argument


def test_the_start_log_says_the_advisory_data_as_proof_does():
    """One wording of the advisory data's age for a user of the image, at a container's start and in `proof`."""
    import datetime as dt

    from common import rules as common_rules

    section = {"as_of": "2026-01-02", "summary": "none known", "carried": []}
    lines = startup.report("515.43.04", None, None, 16 * 2**30, ("3.4.1", "12.8"), advisories=section)
    assert lines[-1] == common_rules.advisory_summary(section, dt.date.today())
    assert "stale, so advisories published since are not listed" in lines[-1]  # 2026-01-02 is past 90 days for any run
