"""The proof's pure parts (verdict, release comparison) and `python -m smoke.proof` on this host."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.render import spec_path
from pipeline.variants import load_matrix
from ppo_bench import bench
from smoke import proof
from tests.proof_rows import header_pairs, header_source, printed_rows, version_row_source, versions_row_pairs

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
H100 = {
    "gpu": True,
    "gpus": ["NVIDIA H100 80GB HBM3"],
    "gpu_names": ["NVIDIA H100 80GB HBM3"],
    "driver": "570.86.15",
    "cpu": "x, 8 cores",
}
CPU = {"gpu": False, "gpus": [], "gpu_names": [], "driver": None, "cpu": "AMD EPYC 7B13, 2 cores"}


def test_verdict_names_the_gpu_and_the_driver():
    assert proof.verdict_line(True, H100, []) == "proof: PROVEN on NVIDIA H100 80GB HBM3, driver 570.86.15, 1 GPU"


def test_verdict_on_the_cpu_says_gpu_checks_not_run():
    line = proof.verdict_line(True, CPU, [])
    assert line.startswith("proof: PROVEN on the CPU only (AMD EPYC 7B13, 2 cores)") and "GPU checks not run" in line


X86_CPUINFO = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n"
ARM_CPUINFO = "processor\t: 0\nBogoMIPS\t: 2000.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n"


def test_emulation_is_an_aarch64_userspace_on_an_x86_cpu(monkeypatch):
    from common.deadlines import emulation

    monkeypatch.delenv("PROVEN_TORCH_EMULATED", raising=False)
    assert emulation("aarch64", X86_CPUINFO) == "aarch64 under emulation (qemu) on an x86_64 CPU"
    assert emulation("aarch64", ARM_CPUINFO) is None  # a Grace or Graviton host: native
    assert emulation("x86_64", X86_CPUINFO) is None
    monkeypatch.setenv("PROVEN_TORCH_EMULATED", "aarch64 under qemu")  # a qemu that imitates the guest's cpuinfo
    assert emulation("aarch64", ARM_CPUINFO) == "aarch64 under qemu"


def test_deadlines_stretch_under_emulation_only():
    from common.deadlines import EMULATION_SCALE, deadline

    assert deadline(120.0, emulated=False) == 120.0
    assert deadline(120.0, emulated=True) == 120.0 * EMULATION_SCALE > 120.0


def test_verdict_under_emulation_claims_nothing_about_arm_hardware_or_a_gpu():
    place = {**CPU, "emulation": "aarch64 under emulation (qemu) on an x86_64 CPU"}
    line = proof.verdict_line(True, place, [])
    assert line.startswith("proof: PROVEN under emulation (aarch64 under emulation (qemu) on an x86_64 CPU; AMD EPYC")
    assert line.endswith("validated under emulation on amd64; not run on Arm hardware or on a GPU")
    assert proof.verdict_line(False, place, ["x"]) == "proof: FAILED: x"


def test_verdict_of_a_failure_lists_what_failed():
    assert (
        proof.verdict_line(False, CPU, ["smoke check(s) failed: versions", "x"])
        == "proof: FAILED: smoke check(s) failed: versions; x"
    )


def test_where_counts_gpus_only_when_cuda_works():
    facts = {"gpus": [{"name": "A"}, {"name": "A"}], "driver": "580.1", "cuda_available": False}
    assert proof.where(facts, "cpu")["gpu"] is False
    place = proof.where({**facts, "cuda_available": True}, "cpu")
    assert place["gpu"] is True and place["gpus"] == ["A", "A"] and place["gpu_names"] == ["A"]


RELEASE = {
    "device": "cpu",
    "device_name": "AMD EPYC, 2 cores",
    "sps": 100_000,
    "seconds_to_target": 2.0,
    "steps_to_target": 180_224,
}


def test_release_comparison_is_like_for_like():
    mine = {"sps_end_to_end": 150_000.0, "seconds_to_target": 1.0, "steps_to_target": 180_224}
    comparison = proof.release_comparison(RELEASE, {"cpu": mine, "cuda": {"sps_end_to_end": 9e6}})
    assert comparison["comparable"] and comparison["sps_ratio"] == 1.5 and comparison["seconds_ratio"] == 0.5
    line = proof.comparison_line(comparison)
    assert "steps/s 150,000 vs 100,000 (1.50x faster)" in line and "seconds to target 1.0 vs 2.0 (2.00x faster)" in line
    assert "not comparable" not in line


def test_slower_reads_slower_for_steps_per_second_and_for_seconds():
    """The proof that printed "0.62x" for steps/s and "1.62x" for seconds to target: both slower, said so."""
    mine = {"sps_end_to_end": 62_000.0, "seconds_to_target": 3.24, "steps_to_target": 180_224}
    line = proof.comparison_line(proof.release_comparison(RELEASE, {"cpu": mine}))
    assert "(1.61x slower)" in line and "(1.62x slower)" in line and "faster" not in line


def test_a_busy_host_makes_the_comparison_say_not_comparable():
    reasons = ["other work took 1.20 of the 2 CPUs, leaving the run 0.80 of its 2 cores"]
    mine = {"sps_end_to_end": 50_000.0, "host": {"busy": True, "busy_reasons": reasons}}
    comparison = proof.release_comparison(RELEASE, {"cpu": mine})
    assert comparison["sps_ratio"] == 0.5  # the JSON keeps its number
    line = proof.comparison_line(comparison)
    assert line.endswith(f"(2.00x slower); not comparable: the host was busy during the gate ({reasons[0]})")


def test_release_from_another_device_gives_no_ratio():
    comparison = proof.release_comparison({**RELEASE, "device": "cuda:0"}, {"cpu": {"sps_end_to_end": 1.0}})
    assert comparison["comparable"] is False and "sps_ratio" not in comparison
    assert "no like-for-like ratio" in proof.comparison_line(comparison)


def test_no_release_figures_is_said():
    assert proof.release_comparison(None, {"cpu": {}}) is None
    assert "none in this image" in proof.comparison_line(None)


GATE = {"env_id": "CartPole-v1", "target_return": 475.0}


@pytest.mark.parametrize(
    ("result", "code", "expected"),
    [
        ({"solved": True}, 0, None),
        ({"solved": False, "final_mean_return": 120.0}, 3, "PPO gate: CartPole-v1 mean return 120.0 < 475"),
        ({}, None, "PPO gate timed out (CartPole-v1)"),
        ({}, 1, "PPO gate failed (exit 1, no result)"),
    ],
)
def test_ppo_failure(result, code, expected):
    assert proof.ppo_failure(GATE, result, code) == expected


def test_ppo_command_follows_the_gate_and_requires_the_gpu_it_runs_on(tmp_path):
    gate = load_matrix().ppo_gate
    command = proof.ppo_command(vars(gate), "cuda", tmp_path)
    assert command[command.index("--total-timesteps") + 1] == str(gate.total_timesteps)
    assert "--require-gpu" in command and "--fail-below-target" in command
    assert "--require-gpu" not in proof.ppo_command(vars(gate), "cpu", tmp_path)


def run_proof(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "smoke.proof", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def host_proof(tmp_path_factory):
    """The proof on this host's own torch (as a bare GPU machine runs it), against the default spec's gate."""
    matrix = load_matrix()
    out = tmp_path_factory.mktemp("proof")
    spec = spec_path(matrix.by_name(next(v.name for v in matrix.variants if v.is_default)))
    done = run_proof("--as-installed", "--spec", str(spec), "--out", str(out))
    return done, json.loads((out / "proof.json").read_text()), out


@pytest.mark.process
def test_host_proof_passes_and_writes_its_outputs(host_proof):
    done, record, out = host_proof
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert record["ok"] and record["ppo"]["solved"] and (out / "ppo" / "learning_curve.png").exists()
    assert record["expect"]["variant"] == "as installed"


def test_host_proof_prints_the_table_then_one_verdict(host_proof):
    done, record, _ = host_proof
    lines = done.stdout.splitlines()
    assert any(line.startswith("CHECK ") for line in lines)
    assert [line for line in lines if line.startswith("proof: PROVEN") or line.startswith("proof: FAILED")] == [record["verdict"]]


@pytest.mark.process
def test_host_proof_rows_say_what_they_measured(host_proof):
    """Every label of the facts header and of the versions row, in a real proof's output, carries the value
    of its own item, as the smoke suite collected it."""
    done, record, _ = host_proof
    facts = record["smoke"]["facts"]
    header, rows = printed_rows(done.stdout)
    assert header_pairs(header) == header_source(facts)
    assert versions_row_pairs(rows["versions"]) == version_row_source(facts)
    assert set(rows) == {c["name"] for c in record["smoke"]["checks"]}


# --- proof --bench atari: its line, beside the release's figure or saying there is none -----

BENCH_RESULT = {
    "device": "cpu",
    "gpu_name": None,
    "env_id": "envpool/Breakout-v5",
    "env_settings": {"repeat_action_probability": 0.0},
    "num_envs": 8,
    "total_env_steps": 12288,
    "wall_seconds": 20.07,
    "sps_end_to_end": 612.4,
    "args": {"amp": "bf16", "time_limit": 20.0},
    "cpu": "AMD EPYC 9B14, 2 cores",
}


def test_bench_line_puts_the_release_figure_beside_this_hosts():
    release = {"sps": 600, "on": "AMD EPYC 9B14, 2 cores", "source": "docs/benchmarks.md"}
    line = bench.bench_line("atari", BENCH_RESULT, release)
    assert line.startswith(
        "proof --bench atari: 612 steps/s on cpu (AMD EPYC 9B14, 2 cores; envpool/Breakout-v5, sticky actions 0, 8 envs, "
        "amp bf16; 12,288 steps in 20.1 s, time limit 20 s)"
    )
    assert "release figure: 600 steps/s on AMD EPYC 9B14, 2 cores (1.02x faster: the same within 5%; docs/benchmarks.md)" in line
    assert "not comparable" not in line and "not the same hardware" not in line
    other = bench.bench_line("atari", {**BENCH_RESULT, "cpu": "Intel(R) Xeon(R) Processor, 2 cores"}, release)
    assert "(0.98x slower" not in other and "; not the same hardware, so the ratio compares two machines" in other
    quiet = {"busy": False, "busy_reasons": []}
    assert bench.bench_line("atari", {**BENCH_RESULT, "host": quiet}, release).endswith("; the host was quiet")


def test_bench_line_says_the_steps_and_seconds_the_run_really_took():
    """A 20 s benchmark whose last iteration ran to 36 s (a busy host) says 36 s, and that its ratio is not comparable."""
    reasons = ["other work took 1.60 of the 2 CPUs, leaving the run 0.40 of its 2 cores"]
    result = {**BENCH_RESULT, "total_env_steps": 2048, "wall_seconds": 35.83, "sps_end_to_end": 57.2}
    line = bench.bench_line("atari", {**result, "host": {"busy": True, "busy_reasons": reasons}}, {"sps": 555, "on": "x"})
    assert "2,048 steps in 35.8 s, time limit 20 s)" in line and "(9.70x slower;" in line
    assert line.endswith(f"; not comparable: the host was busy ({reasons[0]})")


def test_bench_line_on_a_gpu_without_a_release_figure_says_unmeasured():
    result = {**BENCH_RESULT, "device": "cuda:0", "gpu_name": "NVIDIA H100 80GB HBM3"}
    line = bench.bench_line("atari", result, None)
    assert "on cuda (NVIDIA H100 80GB HBM3;" in line
    assert line.endswith("release figure on cuda: none (unmeasured: no GPU has run it yet)")


def test_release_figures_are_read_per_game_and_device_kind(tmp_path):
    figures = tmp_path / "release_figures.json"
    figures.write_text(json.dumps({"ALE/Breakout-v5": {"cpu": {"sps": 598, "on": "x"}, "cuda": None}}))
    assert bench.release_figure("ALE/Breakout-v5", "cpu", figures)["sps"] == 598
    assert bench.release_figure("ALE/Breakout-v5", "cuda", figures) is None
    assert bench.release_figure("ALE/Pong-v5", "cpu", figures) is None
    assert bench.release_figure("ALE/Breakout-v5", "cpu", tmp_path / "missing.json") is None
    committed = json.loads(bench.RELEASE_FIGURES.read_text())
    assert committed[bench.BENCHES["atari"]]["cuda"] is None, "a GPU figure needs a GPU run (docs/evidence/) first"
    assert committed[bench.BENCHES["atari"]]["cpu"]["sps"] > 0  # the figure proof --bench atari shows, under its game's id


def test_the_benchmark_plays_cleanrls_envpool_settings_like_its_release_figure():
    """The release's figure (and CleanRL's side by side) is EnvPool's Breakout-v5: no sticky actions."""
    from ppo_bench.envs import atari_game

    assert atari_game(bench.BENCHES["atari"]).repeat_action_probability == 0.0


def test_bench_seconds_must_be_positive():
    done = run_proof("--bench", "atari", "--seconds", "0")
    assert done.returncode == 2 and done.stderr.strip() == "proof: error: --seconds must be a positive number of seconds, not 0"


def test_no_spec_is_one_line_and_exit_2(tmp_path):
    done = run_proof("--spec", str(tmp_path / "none.json"))
    assert done.returncode == 2
    assert done.stderr.startswith("proof: error: no expectations") and done.stderr.count("\n") == 1


def test_expect_and_as_installed_exclude_each_other():
    done = run_proof("--expect", "{}", "--as-installed")
    assert done.returncode == 2 and "not allowed with argument" in done.stderr


@pytest.mark.process
def test_gpu_evidence_script_runs_end_to_end_in_its_cpu_test_mode(tmp_path):
    """The GPU evidence script, as far as a machine without a GPU can take it: it says it is no evidence."""
    env = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "GPU_EVIDENCE_CPU": "1", "HOME": str(tmp_path)}
    done = subprocess.run(
        ["bash", "scripts/gpu-evidence.sh", str(tmp_path / "ev")], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = (tmp_path / "ev" / "summary.md").read_text()
    assert "NOT GPU evidence" in summary and "proof: PROVEN on the CPU only" in summary
    assert "| throughput-amp-off | 0 |" in summary and "| throughput-amp-bf16 | 0 |" in summary
    assert "| atari-eager | 0 | Breakout, 8 envs, amp " in summary and "GPU utilisation not sampled" in summary


# --- a timed-out gate leaves nothing running (on the host, outside any container) --------

LAUNCHER = """
import pathlib, subprocess, sys, time
# like accelerate/torchrun under rlhf_bench: each rank in a session of its own, each with a child
rank = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"
ranks = [subprocess.Popen([sys.executable, "-c", rank], start_new_session=True) for _ in range(2)]
time.sleep(1.5)  # the ranks' children are started
pathlib.Path(sys.argv[1]).write_text("ready")
print("launched", flush=True)
time.sleep(600)
"""


@pytest.mark.process
def test_a_gate_past_its_deadline_is_stopped_with_every_process_it_started(tmp_path, monkeypatch):
    """The bug it fixes: only the direct child was killed, so ranks in their own sessions ran on,
    holding GPUs, after `proof` had given up."""
    import io

    from common import procs

    launcher, ready = tmp_path / "launcher.py", tmp_path / "ready"
    launcher.write_text(LAUNCHER)
    monkeypatch.setattr(proof, "ppo_command", lambda gate, device, out_dir: [sys.executable, str(launcher), str(ready)])
    seen: list[int] = []
    real_stop = procs.stop_tree

    def watching_stop(proc, grace=10.0):
        seen.extend([proc.pid, *procs.descendants(proc.pid)])
        real_stop(proc, grace)

    monkeypatch.setattr(procs, "stop_tree", watching_stop)
    out = io.StringIO()
    result, code = proof.run_gate({"env_id": "CartPole-v1", "target_return": 1.0}, "cpu", tmp_path / "gate", 6.0, out)
    assert code is None and result == {} and ready.exists() and "launched" in out.getvalue()
    assert len(seen) == 1 + 2 + 2, seen  # the launcher, two ranks, a child of each
    deadline = time.monotonic() + 10
    while any(procs.alive(pid) for pid in seen) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [pid for pid in seen if procs.alive(pid)] == []


def test_an_out_folder_this_user_cannot_write_is_refused_before_any_check(tmp_path, capsys):
    """It used to run every check, then end in a traceback writing proof.json."""
    import os

    if os.getuid() == 0:  # root writes anywhere: make the folder a file's child instead
        blocked = tmp_path / "a-file" / "out"
        (tmp_path / "a-file").write_text("")
    else:
        (tmp_path / "ro").mkdir(mode=0o500)
        blocked = tmp_path / "ro" / "out"
    started = time.monotonic()
    code = proof.main(["--out", str(blocked)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == proof.EXIT_USAGE and time.monotonic() - started < 5
    assert len(err) == 1 and err[0].startswith(f"proof: error: --out {blocked}: not writable by uid") and "--user" in err[0]
