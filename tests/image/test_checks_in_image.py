"""The proof, the smoke suite and the PPO benchmark as a user runs them inside the image."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pipeline.containers import run_in_image
from ppo_bench import bench
from smoke import checks
from tests.proof_rows import header_pairs, header_source, printed_rows, version_row_source, versions_row_pairs

pytestmark = pytest.mark.image

OUT = "/tmp/out"
REPO = Path(__file__).resolve().parents[2]


def run(docker, image, command: list[str], timeout_s: float = 900, **kwargs):
    """A command through the image's entrypoint, as `docker run --rm IMAGE COMMAND` runs it."""
    return run_in_image(docker, image, command, timeout_s=timeout_s, fetch=OUT, **kwargs)


@pytest.fixture(scope="module")
def cpu_proof(docker, image):
    """`docker run --rm IMAGE proof --out DIR` on a host without a GPU."""
    return run(docker, image, ["proof", "--out", OUT], timeout_s=1200, shm_size="1g")


def test_proof_passes_on_the_cpu(cpu_proof):
    assert cpu_proof.exit_code == 0, cpu_proof.stdout[-3000:] + cpu_proof.stderr[-3000:]
    record = json.loads(cpu_proof.files["proof.json"])
    assert record["ok"] is True and record["gpu"] is False


def test_proof_says_gpu_checks_not_run_in_one_verdict_line(cpu_proof):
    verdicts = [line for line in cpu_proof.stdout.splitlines() if line.startswith("proof: ")]
    assert verdicts[0].startswith("proof: PROVEN on the CPU only") and "GPU checks not run" in verdicts[0]


def test_proof_json_names_every_check(cpu_proof):
    record = json.loads(cpu_proof.files["proof.json"])
    assert [c["name"] for c in record["smoke"]["checks"]] == list(checks.NAMES)


def test_proof_writes_the_learning_curve(cpu_proof):
    assert cpu_proof.files["ppo/learning_curve.png"][:8] == b"\x89PNG\r\n\x1a\n"


def test_proof_compares_with_the_release_figures(cpu_proof, docker, image):
    """The stamped image carries the release's PPO figures; the proof gives the like-for-like ratio."""
    record = json.loads(cpu_proof.files["proof.json"])
    comparison = record["release_comparison"]
    assert comparison["comparable"] is True and comparison["device"] == "cpu"
    assert comparison["sps_ratio"] > 0
    assert "against the release (cpu:" in cpu_proof.stdout
    release = json.loads(docker.images.get(image).labels["io.proven-torch.release-ppo"])
    assert comparison["release"] == release


def test_proof_require_gpu_without_a_gpu_is_one_line_exit_3(docker, image):
    done = run(docker, image, ["proof", "--require-gpu"], timeout_s=300)
    assert done.exit_code == 3
    assert done.stderr.strip().count("\n") == 0 and done.stderr.startswith("proof: no usable GPU")
    assert "Traceback" not in done.stdout + done.stderr


def test_proof_bench_atari_prints_its_real_wall_time_and_steps_per_second_beside_the_release(docker, image):
    """`proof --bench atari --seconds 5 | ...` on the CPU, each line stamped as it arrives in the container: PPO on
    Breakout (Nature CNN, EnvPool's settings as the release figure was measured) in the image, one line with the
    host's condition and the figure the image carries; the wall time that line prints matches the time from
    ppo_bench's first line to its last within 10%, and the progress counts seconds against the 5 s limit, never
    steps against a total (it printed "/1,000,000,000")."""
    stamp = 'while IFS= read -r line; do printf \'%s %s\\n\' "$(date +%s.%N)" "$line"; done'
    script = f"set -o pipefail; proof --bench atari --seconds 5 --out {OUT} 2>&1 | {stamp}"
    done = run(docker, image, ["bash", "-c", script], timeout_s=300, shm_size="1g")
    assert done.exit_code == 0, done.stdout[-3000:] + done.stderr[-3000:]
    stamped = [(float(t), text) for t, text in (ln.split(" ", 1) for ln in done.stdout.splitlines() if " " in ln)]
    ppo = [(t, text.removeprefix("  | ")) for t, text in stamped if text.startswith("  | ppo_bench: ")]
    steps = [(t, text) for t, text in ppo if text.startswith("ppo_bench: step ")]
    game = bench.BENCHES["atari"]
    assert ppo[0][1].startswith(f"ppo_bench: {game} (atari backend)") and steps, done.stdout
    [line] = [text for _, text in stamped if text.startswith("proof --bench atari: ")]
    printed = float(re.search(r"steps in ([\d.]+) s, time limit 5 s\)", line).group(1))
    measured = steps[-1][0] - ppo[0][0]
    assert abs(printed - measured) <= 0.1 * measured, (printed, measured, done.stdout)
    assert all("s of 5s (time limit)" in text and not re.search(r"step [\d,]+/", text) for _, text in steps), done.stdout
    assert "1,000,000,000" not in done.stdout
    assert " steps/s on cpu (" in line and f"{game}, sticky actions 0, 8 envs" in line, line
    result = json.loads(done.files["bench-atari/result.json"])
    assert result["backend"] == "atari" and result["total_env_steps"] >= 1024 and result["wall_seconds"] >= 5
    assert f"{result['sps_end_to_end']:,.0f} steps/s" in line and result["cpu"] in line  # the record names the CPU too
    assert f"{result['total_env_steps']:,} steps in {result['wall_seconds']:.1f} s, time limit 5 s)" in line
    release = json.loads((REPO / "ppo_bench" / "release_figures.json").read_text())[game]["cpu"]
    assert f"release figure: {release['sps']:,} steps/s on {release['on']} (" in line  # the figure the image carries
    assert re.search(r"\(\d+\.\d\dx( faster| slower)?(: the same within 5%)?;", line), line
    assert ("; not comparable: the host was busy (" in line) == result["host"]["busy"]
    assert line.endswith("; the host was quiet") != result["host"]["busy"], line
    [host] = [text for _, text in ppo if text.startswith("ppo_bench: host during the run: ")]
    assert host.endswith(": quiet") != result["host"]["busy"], host


def test_proof_rows_say_what_they_measured(cpu_proof):
    """Every label of the facts header and the versions row carries its own item's value, as collected in the image."""
    record = json.loads(cpu_proof.files["proof.json"])
    facts = record["smoke"]["facts"]
    header, rows = printed_rows(cpu_proof.stdout)
    assert header_pairs(header) == header_source(facts)
    assert versions_row_pairs(rows["versions"]) == version_row_source(facts)
    assert "python 3.11 (" not in rows["versions"]


def test_proof_bad_argument_exits_2(docker, image):
    done = run(docker, image, ["proof", "--no-such-flag"], timeout_s=120)
    assert done.exit_code == 2 and done.stderr.startswith("proof: error:")


def test_smoke_with_no_arguments_checks_the_baked_pins(docker, image, variant):
    done = run(
        docker, image, ["python", "-m", "smoke", "--only", "versions,driver", "--json-out", f"{OUT}/smoke.json"], timeout_s=300
    )
    assert done.exit_code == 0, done.stdout + done.stderr
    result = json.loads(done.files["smoke.json"])
    assert result["expect"]["torch"] == variant.torch and result["expect"]["cuda"] == variant.cuda


def test_proof_fails_when_the_baked_pins_disagree(docker, image):
    """An image whose spec disagrees with what is installed does not pass its proof."""
    script = (
        "import json; s = json.load(open('/opt/proven-torch/expect.json')); s['expect']['torch'] = '0.0.1'; "
        "json.dump(s, open('/tmp/wrong.json', 'w'))"
    )
    done = run(docker, image, ["bash", "-c", f'python -c "{script}" && proof --spec /tmp/wrong.json --out {OUT}'], timeout_s=600)
    assert done.exit_code == 1
    record = json.loads(done.files["proof.json"])
    assert record["ok"] is False and "versions" in record["failures"][0]
    assert "ppo" not in record  # the gate does not run after a failed check


def test_smoke_require_gpu_turns_every_gpu_check_into_a_failure(docker, image):
    done = run(docker, image, ["python", "-m", "smoke", "--require-gpu", "--json-out", f"{OUT}/smoke.json"], timeout_s=900)
    assert done.exit_code == 1
    report = json.loads(done.files["smoke.json"])
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert report["ok"] is False and report["require_gpu"] is True
    assert "skip" not in statuses.values()
    for name in ("gpu", "cudnn", "amp", "driver"):
        assert statuses[name] == "fail", name
    assert statuses["versions"] == "pass"


def test_gymnasium_backend_solves_cartpole_and_writes_its_outputs(docker, image, variant):
    """The path users take: gymnasium vector envs (CleanRL's defaults), on the CPU."""
    gate = variant.ppo_gate
    command = ["python", "-m", "ppo_bench", "--backend", "gymnasium", "--env-id", gate.env_id, "--seed", str(gate.seed)]
    command += ["--total-timesteps", str(gate.total_timesteps), "--target-return", str(gate.target_return), "--device", "cpu"]
    command += ["--out-dir", f"{OUT}/ppo", "--stop-at-target", "--fail-below-target", "--no-progress"]
    step = run(docker, image, command)
    result = json.loads(step.files["ppo/result.json"])
    assert step.exit_code == 0, result
    assert result["solved"] and result["backend"] == "gymnasium" and result["final_mean_return"] >= gate.target_return
    assert step.files["ppo/learning_curve.png"][:8] == b"\x89PNG\r\n\x1a\n"
    assert any(name.startswith("ppo/events.out.tfevents") for name in step.files)


def _pip_fails(docker, image, *args, env=None) -> str:
    """Run `pip install --no-index ARGS` in a container (no network); it must fail. Its output."""
    container = docker.containers.run(
        image,
        ["pip", "install", "--no-index", *args],
        network_disabled=True,
        environment=env or {},
        detach=True,
        labels={"io.proven-torch.role": "test"},
    )
    try:
        assert container.wait(timeout=120)["StatusCode"] != 0
        return container.logs(stdout=True, stderr=True).decode(errors="replace")
    finally:
        container.remove(force=True, v=True)


def test_pip_in_a_container_cannot_replace_torch(docker, image, variant):
    """The image's pip constraint holds torch at the pin (no network needed to see it)."""
    output = _pip_fails(docker, image, "torch==0.0.1")
    assert f"(constraint) torch=={variant.torch}" in output


@pytest.fixture(scope="module")
def unconstrained_pip_output(docker, image) -> str:
    """pip asked for a torch no index has, with the image's constraint lifted (PIP_CONSTRAINT="")."""
    return _pip_fails(docker, image, "torch==0.0.1", env={"PIP_CONSTRAINT": ""})


def test_the_constraint_can_be_lifted_on_purpose(unconstrained_pip_output):
    assert "(constraint)" not in unconstrained_pip_output
    assert "No matching distribution found for torch==0.0.1" in unconstrained_pip_output


def test_pip_has_a_writable_cache(unconstrained_pip_output):
    assert "is not owned or is not writable" not in unconstrained_pip_output
