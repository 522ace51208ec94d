"""`proof`: prove this image on this host: the smoke suite, then the PPO gate.

    docker run --rm --gpus all IMAGE proof [--require-gpu] [--out DIR]
    python -m smoke.proof --as-installed --spec images/expect/2.9-cu128.json --out DIR   (a bare host)
    docker run --rm --gpus all IMAGE proof --bench atari [--seconds 60]   (a benchmark instead, ppo_bench/bench.py)

What to expect and how the gate runs come from the image's own spec
(/opt/proven-torch/expect.json, generated from images/variants.toml). build.py
validates every image with this same command, so a user's run and the release's
run are the same proof; the release's PPO figures travel with the image
(PROVEN_TORCH_RELEASE, stamped after validation) and are compared here.

Exit codes: 0 proven (--bench: it ran); 1 a check or the PPO gate failed (--bench: it did not
run to its end); 2 bad arguments; 3 --require-gpu and no usable GPU.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

from common import deadlines, procs
from common import rules as common_rules
from common.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, OneLineParser, UsageError, write_json
from common.host import host_cpu, speed_words
from smoke import cli, facts, rules
from smoke.expect import load_spec

EXIT_PROVEN, EXIT_NO_GPU = EXIT_OK, 3
NOT_NATIVE = "validated under emulation on amd64; not run on Arm hardware or on a GPU"
SCHEMA = 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from ppo_bench import bench  # ppo_bench's benchmark table: stdlib only, imported when proof runs

    parser = OneLineParser(
        prog="proof",
        description="Prove this proven-torch image on this host: the smoke suite, then the PPO gate.",
        epilog="exit codes: 0 proven; 1 a check or the PPO gate failed; 2 bad arguments; 3 --require-gpu and no usable GPU",
    )
    cli.add_expect_arguments(parser)
    parser.add_argument("--out", type=Path, help="write proof.json, smoke.json and the PPO outputs (learning_curve.png) here")
    parser.add_argument(
        "--spec",
        type=Path,
        help="the image spec to prove against (default: $PROVEN_TORCH_SPEC, else /opt/proven-torch/expect.json)",
    )
    parser.add_argument(
        "--ppo-timeout",
        type=float,
        default=None,
        help=(
            f"seconds the PPO gate may take (default: {deadlines.DEADLINES['ppo_gate']:.0f}; "
            f"{deadlines.EMULATION_SCALE:.0f}x that under emulation)"
        ),
    )
    parser.add_argument(
        "--cpu-ratio",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="on a GPU, also run the gate on the CPU and report the GPU/CPU steps/s ratio (default: on)",
    )
    parser.add_argument(
        "--bench",
        choices=sorted(bench.BENCHES),
        help="instead of the proof, a benchmark: 'atari' trains PPO on Breakout (Nature CNN) for --seconds and prints "
        "its steps/s beside the release's figure (not part of the proof)",
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="how long --bench runs (default: 60)")
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        raise UsageError(f"--seconds must be a positive number of seconds, not {args.seconds:g}")
    return args


# --------------------------------------------------------------------------- pure parts


def where(smoke_facts: dict, host_cpu: str) -> dict:
    """What the proof ran on: GPUs and driver, or the CPU."""
    gpus = smoke_facts.get("gpus") or []
    names = sorted({g["name"] for g in gpus})
    return {
        "gpu": bool(smoke_facts.get("cuda_available")) and bool(gpus),
        "gpus": [g["name"] for g in gpus],
        "gpu_names": names,
        "driver": smoke_facts.get("driver"),
        "cpu": host_cpu,
        "emulation": smoke_facts.get("emulation"),  # e.g. "aarch64 under emulation (qemu) on an x86_64 CPU"
    }


def verdict_line(ok: bool, place: dict, failures: list[str]) -> str:
    """The one line that says what was proven where (or what failed)."""
    if not ok:
        return "proof: FAILED: " + "; ".join(failures)
    if place.get("emulation"):  # never a claim about the hardware the image is built for
        return f"proof: PROVEN under emulation ({place['emulation']}; {place['cpu']}): {NOT_NATIVE}"
    if place["gpu"]:
        count = len(place["gpus"])
        return (
            f"proof: PROVEN on {', '.join(place['gpu_names'])}, driver {place['driver'] or 'unknown'}, "
            f"{count} GPU{'s' if count != 1 else ''}"
        )
    # (--require-gpu without a usable GPU ended the proof before: a CPU-only proof had none visible)
    return f"proof: PROVEN on the CPU only ({place['cpu']}): GPU checks not run (no GPU visible)"


def release_comparison(release: dict | None, runs: dict[str, dict]) -> dict | None:
    """This host's PPO figures against the release's, like for like (same device kind).

    `release` is what validation stamped (device, steps/s, seconds and steps to
    target); `runs` maps a device kind ("cpu", "cuda") to this host's result.json.
    """
    if not release:
        return None
    kind = str(release.get("device", "")).split(":")[0]
    mine = runs.get(kind)
    out = {"release": release, "device": kind, "comparable": bool(mine)}
    if not mine:
        return out
    sps, rel_sps = mine.get("sps_end_to_end"), release.get("sps")
    secs, rel_secs = mine.get("seconds_to_target"), release.get("seconds_to_target")
    out.update(
        sps=sps,
        seconds_to_target=secs,
        steps_to_target=mine.get("steps_to_target"),
        sps_ratio=round(sps / rel_sps, 2) if sps and rel_sps else None,
        seconds_ratio=round(secs / rel_secs, 2) if secs and rel_secs else None,
        host_busy=(mine.get("host") or {}).get("busy_reasons") or [],  # common.host's rule; [] when quiet or unknown
    )
    return out


def comparison_line(comparison: dict | None) -> str:
    if comparison is None:
        return "release figures: none in this image (not stamped by a validated build)"
    rel = comparison["release"]
    on = f"{comparison['device']}: {rel.get('device_name') or '?'}"
    if not comparison["comparable"]:
        return f"release figures are from {on}; this host did not run the gate there: no like-for-like ratio"
    parts = []
    if comparison.get("sps_ratio") is not None:
        ratio = comparison["sps"] / rel["sps"]
        parts.append(f"steps/s {comparison['sps']:,.0f} vs {rel['sps']:,.0f} ({speed_words(ratio)})")
    if comparison.get("seconds_ratio") is not None:
        ratio = comparison["seconds_to_target"] / rel["seconds_to_target"]
        parts.append(
            f"seconds to target {comparison['seconds_to_target']:.1f} vs {rel['seconds_to_target']:.1f} "
            f"({speed_words(ratio, lower_is_better=True)})"
        )
    line = f"against the release ({on}): " + ("; ".join(parts) or "no figures to compare")
    if comparison.get("host_busy"):
        line += f"; not comparable: the host was busy during the gate ({'; '.join(comparison['host_busy'])})"
    return line


def ppo_failure(gate: dict, result: dict, exit_code: int | None) -> str | None:
    if exit_code == 0 and result.get("solved"):
        return None
    got = result.get("final_mean_return")
    if exit_code is None:
        return f"PPO gate timed out ({gate['env_id']})"
    if got is not None:
        return f"PPO gate: {gate['env_id']} mean return {got:.1f} < {gate['target_return']:g}"
    return f"PPO gate failed (exit {exit_code}, no result)"


def ppo_command(gate: dict, device: str, out_dir: Path) -> list[str]:
    cmd = [
        sys.executable, "-m", "ppo_bench",
        "--backend", gate["backend"], "--env-id", gate["env_id"], "--seed", str(gate["seed"]),
        "--total-timesteps", str(gate["total_timesteps"]), "--target-return", str(gate["target_return"]),
        "--device", device, "--out-dir", str(out_dir),
        "--stop-at-target", "--fail-below-target", "--no-progress",
    ]  # fmt: skip # argv grouped as on a command line
    return cmd + (["--require-gpu"] if device == "cuda" else [])


def flavor_gate_command(flavor: str, gate: dict, out_dir: Path) -> list[str]:
    """A flavor's gate: `python -m <flavor>_bench` with the spec's settings as its options (it picks
    the device itself: a GPU when there is one, bf16 there, fp32 on the CPU)."""
    options = [item for key, value in gate.items() for item in (f"--{key.replace('_', '-')}", str(value))]
    return [sys.executable, "-m", f"{flavor}_bench", *options, "--out", str(out_dir)]


def flavor_gate_failure(flavor: str, result: dict, exit_code: int | None) -> str | None:
    if exit_code == 0 and result.get("passed"):
        return None
    if exit_code is None:
        return f"{flavor.upper()} gate timed out"
    return f"{flavor.upper()} gate: " + (result.get("failure") or f"exit {exit_code}, no result")


# --------------------------------------------------------------------------- effects


def load_release() -> dict | None:
    text = os.environ.get("PROVEN_TORCH_RELEASE")
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def run_gate(gate: dict, device: str, out_dir: Path, timeout: float, out: TextIO) -> tuple[dict, int | None]:
    print(
        f"==> PPO gate on {device}: {gate['env_id']} must reach a mean return of {gate['target_return']:g}", file=out, flush=True
    )
    code = procs.run_streamed(ppo_command(gate, device, out_dir), timeout, out)
    try:
        result = json.loads((out_dir / "result.json").read_text())
    except (OSError, ValueError):
        result = {}
    return result, code


def prove(args: argparse.Namespace, out: TextIO) -> tuple[int, dict]:
    """The proof; returns (exit code, proof record)."""
    started = time.monotonic()
    spec = load_spec(args.spec)
    gate = spec["ppo_gate"]
    out_dir = args.out or Path(tempfile.mkdtemp(prefix="proof-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    emulated = deadlines.emulation()
    if args.ppo_timeout is None:
        args.ppo_timeout = deadlines.wait_for("ppo_gate", emulated is not None)
    if emulated:
        print(f"proof: running as {emulated}: the gate may take {args.ppo_timeout:.0f} s; {NOT_NATIVE}", file=out, flush=True)
    record: dict = {
        "schema": SCHEMA,
        "ok": False,
        "require_gpu": args.require_gpu,
        "variant": spec.get("variant"),
        "ppo_gate": gate,
        "advisories": spec.get("advisories"),
        "failures": [],
    }
    for line in [
        common_rules.advisory_summary(spec.get("advisories"), dt.date.today()),
        *common_rules.advisory_details(spec.get("advisories")),
    ]:
        print(line, file=out, flush=True)

    def stopped(code: int, failure: str, verdict: str | None = None) -> tuple[int, dict]:
        return code, {**record, "failures": [failure], "verdict": verdict or f"proof: FAILED: {failure}"}

    try:
        import torch
    except Exception as err:  # an image whose torch is broken or missing: a failed proof, said in one line
        return stopped(EXIT_FAILED, f"torch does not import: {type(err).__name__}: {err}")

    expect = record["expect"] = cli.resolve_expect(args, spec)
    # The driver before any CUDA call: a too-old driver gets one line that names
    # the driver needed, instead of a failure deep inside torch.
    driver, _source = facts.driver_version()
    if driver:
        floor = rules.driver_status(driver, expect.get("min_driver"), expect.get("cuda"), expect.get("driver_lines"))
        if floor.status == "fail":
            return stopped(EXIT_FAILED, floor.message)
    if args.require_gpu and not torch.cuda.is_available():
        reason = cli.checks.Context(expect=expect, require_gpu=True, facts=facts.collect(torch)).no_gpu_reason()
        return stopped(
            EXIT_NO_GPU, f"--require-gpu: no usable GPU: {reason}", f"proof: no usable GPU, and --require-gpu was given: {reason}"
        )

    smoke = cli.run_suite(expect, args.require_gpu, out, out_dir / "smoke.json")
    place = where(smoke["facts"], host_cpu())
    record.update(smoke=smoke, where=place, gpu=place["gpu"])
    failures = []
    if not smoke["ok"]:
        failures.append(f"smoke check(s) failed: {', '.join(cli.failed_checks(smoke['checks'])) or 'incomplete'}")

    runs: dict[str, dict] = {}
    if not failures:
        device = "cuda" if place["gpu"] else "cpu"
        result, code = run_gate(gate, device, out_dir / "ppo", args.ppo_timeout, out)
        record["ppo"] = result
        runs[device] = result
        problem = ppo_failure(gate, result, code)
        if problem:
            failures.append(problem)
        elif device == "cuda" and args.cpu_ratio:
            cpu, _ = run_gate(gate, "cpu", out_dir / "ppo-cpu", args.ppo_timeout, out)
            record["ppo_cpu"] = cpu
            runs["cpu"] = cpu
            if cpu.get("sps_end_to_end") and result.get("sps_end_to_end"):
                record["gpu_cpu_sps_ratio"] = round(result["sps_end_to_end"] / cpu["sps_end_to_end"], 2)
    flavor = spec.get("flavor")
    if flavor and not failures:  # a flavor's own gate, after everything the base proves
        print(f"==> {flavor.upper()} gate (the {flavor} flavor's own)", file=out, flush=True)
        gate_dir = out_dir / flavor
        code = procs.run_streamed(flavor_gate_command(flavor, spec[f"{flavor}_gate"], gate_dir), args.ppo_timeout, out)
        try:
            result = json.loads((gate_dir / "result.json").read_text())
        except (OSError, ValueError):
            result = {}
        record[flavor] = result
        problem = flavor_gate_failure(flavor, result, code)
        if problem:
            failures.append(problem)
    comparison = release_comparison(load_release(), runs)
    record["release_comparison"] = comparison
    if runs:
        print(comparison_line(comparison), file=out, flush=True)
    if record.get("gpu_cpu_sps_ratio"):
        ratio = record["ppo"]["sps_end_to_end"] / record["ppo_cpu"]["sps_end_to_end"]
        print(f"the gate's steps/s on the GPU against the CPU: {speed_words(ratio)}", file=out, flush=True)
    record.update(ok=not failures, failures=failures, seconds=round(time.monotonic() - started, 1), out=str(out_dir))
    record["verdict"] = verdict_line(not failures, place, failures)
    return (EXIT_PROVEN if not failures else EXIT_FAILED), record


def unwritable(folder: Path) -> str | None:
    """Why this user cannot write proof's outputs into `folder` (checked before any check runs), or None."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".proof-write-test-"):
            pass
    except OSError as err:
        return (
            f"not writable by uid {os.getuid()} ({err.strerror}); mount a folder this user can write "
            '(e.g. `docker run --user "$(id -u):$(id -g)" -v "$PWD/out:/out" IMAGE proof --out /out`)'
        )
    return None


def run_bench(args: argparse.Namespace, out: TextIO) -> int:
    """proof --bench NAME: the benchmark, its line on stdout (on stderr when it failed)."""
    if args.require_gpu:
        import torch

        if not torch.cuda.is_available():
            print(f"proof: --bench {args.bench} --require-gpu: torch sees no CUDA GPU", file=sys.stderr, flush=True)
            return EXIT_NO_GPU
    out_dir = (args.out or Path(tempfile.mkdtemp(prefix="proof-bench-"))) / f"bench-{args.bench}"
    from ppo_bench import bench  # ppo_bench's own module; stdlib only, like this one

    code, line = bench.run_bench(args.bench, args.seconds, args.require_gpu, out_dir, host_cpu(), out)
    print(line, file=out if code == EXIT_OK else sys.stderr, flush=True)
    if args.out:
        print(f"proof: outputs in {out_dir}", file=out, flush=True)
    else:
        print(
            f"proof: its outputs were in {out_dir} inside the container; pass --out DIR (a mounted folder) to keep them",
            file=out,
            flush=True,
        )
    return code


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        args = parse_args(argv)
    except UsageError as err:
        print(f"proof: error: {err}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    if args.out and (problem := unwritable(args.out)):
        print(f"proof: error: --out {args.out}: {problem}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    if args.bench:
        return run_bench(args, out)
    try:
        code, record = prove(args, out)
    except UsageError as err:
        print(f"proof: error: {err}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except Exception as err:  # a crash is a failed proof with its reason, in proof.json too
        problem = f"proof crashed: {type(err).__name__}: {err}".splitlines()[0][:300]
        code, record = EXIT_FAILED, {"schema": SCHEMA, "ok": False, "failures": [problem], "verdict": f"proof: FAILED: {problem}"}
    if args.out:
        write_json(args.out / "proof.json", record)
    stream = out if code == EXIT_PROVEN else sys.stderr
    print(record["verdict"], file=stream, flush=True)
    if args.out:
        print(f"proof: outputs in {args.out}", file=out, flush=True)
    return code


if __name__ == "__main__":  # `proof` (container/proof) and `python -m smoke.proof`
    # Out right after the verdict, whatever is left of its own: a check's worker blocked on a lock
    # kept the 2.11-cu130 arm64 proof alive after its FAILED line, until the pipeline's deadline.
    procs.exit_now(main())
