#!/usr/bin/env python3
"""ppo_bench's Atari mode against CleanRL's ppo_atari_envpool.py, side by side, on this CPU.

    scripts/bench-ppo-atari.py [--rounds 2] [--steps 49152] [--threads 2] [--out DIR] [--record]

(CLEANRL_PYTHON / CLEANRL_PPO_ATARI, or --cleanrl-python / --cleanrl-ppo-atari; made by
scripts/bench-ppo-setup-cleanrl.sh.) Each round runs, one after another on the same
machine, CleanRL's unmodified ppo_atari_envpool.py (EnvPool's Breakout-v5, its defaults:
8 environments x 128 steps, 4 epochs of 4 minibatches, fp32) and `python -m ppo_bench
--env-id envpool/Breakout-v5` (the same game with EnvPool's settings: no sticky actions, where
ALE/Breakout-v5 repeats actions with probability 0.25) with the same settings in four configurations: its defaults
(--amp auto: bf16 where the CPU computes it natively), --amp off (fp32, as CleanRL),
--channels-last, and --compile. Both use the same torch thread count (OMP_NUM_THREADS for
CleanRL, --threads for ppo_bench) and the same number of environment steps. Steps/s are
end to end: environment steps over wall time from after the imports (CleanRL's through
bench-ppo-cleanrl-runner.py's timestamps) to the end of the last iteration. Writes
OUT/bench.json and prints a Markdown table with the ratios to CleanRL (medians over the
rounds) and the host's condition during each ppo_bench run (common.host: quiet or busy). --record
writes the default configuration's median into ppo_bench/release_figures.json as the release's
CPU figure (`proof --bench atari` shows it); it refuses a figure from a run on a busy host.
Exit 0 when every run finished (and, with --record, the figure was recorded), 1 otherwise (ratios are
reported, not gated).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
RUNNER = HERE / "bench-ppo-cleanrl-runner.py"
STAMP = re.compile(r"^@([\d.]+) ([\d.]+)@ (.*)$")
SPS = re.compile(r"^SPS: (\d+)")
BATCH = 8 * 128  # CleanRL's ppo_atari_envpool.py: num_envs x num_steps
ENV_ID = "envpool/Breakout-v5"  # ppo_bench's name for what CleanRL's script plays: EnvPool's Breakout-v5 settings
CONFIGS = {  # name -> ppo_bench options beyond the shared ones
    "ppo_bench (defaults)": [],
    "ppo_bench --amp off (fp32)": ["--amp", "off"],
    "ppo_bench --channels-last": ["--channels-last"],
    "ppo_bench --compile": ["--compile"],
}


def _bench_ppo():
    """scripts/bench-ppo.py's machine() (one description of the machine for both benchmarks)."""
    spec = importlib.util.spec_from_file_location("bench_ppo", HERE / "bench-ppo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_cleanrl(python: str, script: str, steps: int, threads: int, workdir: Path, timeout: float) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [python, "-u", str(RUNNER), script, "--env-id", "Breakout-v5", "--total-timesteps", str(steps), "--seed", "1"]
    cmd += ["--no-cuda", "--exp-name", "ppo_atari_envpool"]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    try:
        proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"command": cmd, "error": f"timed out after {timeout:.0f} s"}
    (workdir / "stdout.log").write_text(proc.stdout)
    (workdir / "stderr.log").write_text(proc.stderr)
    iterations, wall, own_sps = 0, None, None
    for line in proc.stdout.splitlines():
        if (m := STAMP.match(line.strip())) and (s := SPS.match(m.group(3))):
            iterations, wall, own_sps = iterations + 1, float(m.group(1)), int(s.group(1))
    if proc.returncode != 0 or not iterations:
        return {"command": cmd, "error": f"exit {proc.returncode}: {proc.stderr.strip()[-500:]}"}
    env_steps = iterations * BATCH
    return {
        "command": cmd,
        "omp_num_threads": threads,
        "env_steps": env_steps,
        "wall_seconds": wall,
        "sps_end_to_end": env_steps / wall,
        "own_reported_sps": own_sps,  # CleanRL's "SPS:" (its clock starts after making the environments)
    }


def run_ours(python: str, extra: list[str], steps: int, threads: int, out_dir: Path, timeout: float) -> dict:
    cmd = [python, "-m", "ppo_bench", "--env-id", ENV_ID, "--total-timesteps", str(steps), "--seed", "1"]
    cmd += ["--threads", str(threads), "--checkpoint-every", "0", "--no-progress", "--out-dir", str(out_dir), *extra]
    try:
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"command": cmd, "error": f"timed out after {timeout:.0f} s"}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "stdout.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0 or not (out_dir / "result.json").exists():
        return {"command": cmd, "error": f"exit {proc.returncode}: {proc.stderr.strip()[-500:]}"}
    r = json.loads((out_dir / "result.json").read_text())
    (out_dir / "checkpoint.pt").unlink(missing_ok=True)
    return {
        "command": cmd,
        "env_steps": r["total_env_steps"],
        "wall_seconds": r["wall_seconds"],
        "sps_end_to_end": r["sps_end_to_end"],
        "sps_rollout": r["sps_rollout"],
        "sps_update": r["sps_update"],
        "amp": r["args"]["amp"],
        "torch_threads": r["torch_threads"],
        "torch": r["torch"],
        "env_settings": r.get("env_settings"),
        "host": r.get("host"),
    }


def record_release_figure(sps: float, machine: dict, rounds: int) -> None:
    path = REPO / "ppo_bench" / "release_figures.json"
    figures = json.loads(path.read_text())
    figures.setdefault(ENV_ID, {"cuda": None})["cpu"] = {
        "sps": round(sps),
        "on": f"{machine['cpu_model']}, {machine['nproc']} cores",
        "measured": dt.date.today().isoformat(),
        "conditions": f"{rounds} round(s), the host quiet in every ppo_bench run (common.host's rule)",
        "source": "docs/benchmarks.md (scripts/bench-ppo-atari.py)",
    }
    path.write_text(json.dumps(figures, indent=2) + "\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cleanrl-python", default=os.environ.get("CLEANRL_PYTHON"), help="python of CleanRL's venv")
    p.add_argument("--cleanrl-ppo-atari", default=os.environ.get("CLEANRL_PPO_ATARI"), help="CleanRL's ppo_atari_envpool.py")
    p.add_argument("--python", default=str(REPO / ".venv" / "bin" / "python"), help="python for ppo_bench")
    p.add_argument("--rounds", type=int, default=2, help="rounds of all five runs (default 2)")
    p.add_argument("--steps", type=int, default=48 * BATCH, help="environment steps per run (default 49,152: 48 iterations)")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads for both (default: one per core)")
    p.add_argument("--out", default=str(REPO / "runs" / "bench-ppo-atari"), help="output folder")
    p.add_argument("--timeout", type=float, default=900, help="seconds allowed per run")
    p.add_argument("--record", action="store_true", help="write the default configuration's median to release_figures.json")
    a = p.parse_args()
    if not a.cleanrl_ppo_atari or not Path(a.cleanrl_ppo_atari).is_file():
        p.error(
            "--cleanrl-ppo-atari (or CLEANRL_PPO_ATARI) must name CleanRL's ppo_atari_envpool.py (bench-ppo-setup-cleanrl.sh)"
        )
    if not a.cleanrl_python or not shutil.which(a.cleanrl_python):
        p.error("--cleanrl-python (or CLEANRL_PYTHON) must name the python of CleanRL's venv (bench-ppo-setup-cleanrl.sh)")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    machine = _bench_ppo().machine()
    names = ["CleanRL ppo_atari_envpool.py", *CONFIGS]
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for rnd in range(1, a.rounds + 1):  # alternate the programs so all see the same machine conditions
        for name in names:
            print(f"round {rnd}: {name} ...", flush=True)
            where = out / f"round{rnd}" / re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")
            if name in CONFIGS:
                res = run_ours(a.python, CONFIGS[name], a.steps, a.threads, where, a.timeout)
            else:
                res = run_cleanrl(a.cleanrl_python, a.cleanrl_ppo_atari, a.steps, a.threads, where, a.timeout)
            runs[name].append(res)
            print(
                f"  {json.dumps({k: res.get(k) for k in ('env_steps', 'wall_seconds', 'sps_end_to_end', 'error')})}", flush=True
            )

    def median_sps(name):
        vals = [r["sps_end_to_end"] for r in runs[name] if "error" not in r]
        return statistics.median(vals) if vals else None

    base = median_sps(names[0])
    summary = {name: {"median_sps": median_sps(name)} for name in names}
    for name in names:
        m = summary[name]["median_sps"]
        summary[name]["ratio_to_cleanrl"] = m / base if m and base else None
    report = {
        "machine": machine,
        "steps_per_run": a.steps,
        "threads": a.threads,
        "rounds": a.rounds,
        "cleanrl_script": str(Path(a.cleanrl_ppo_atari).resolve()),
        "runs": runs,
        "summary": summary,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    (out / "bench.json").write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"\n{machine['cpu_model']}, {machine['nproc']} cores; {a.steps:,} steps per run, {a.threads} torch threads, {a.rounds} rounds"
    )
    print("\n| program | steps/s (median) | runs | ratio to CleanRL | host (ppo_bench runs) |")
    print("|---|---|---|---|---|")
    for name in names:
        per_run = ", ".join(f"{r['sps_end_to_end']:.0f}" if "error" not in r else "failed" for r in runs[name])
        ratio = summary[name]["ratio_to_cleanrl"]
        hosts = ", ".join(("busy" if r["host"]["busy"] else "quiet") for r in runs[name] if r.get("host")) or "-"
        print(
            f"| {name} | {summary[name]['median_sps'] or 0:,.0f} | {per_run} | "
            f"{'-' if ratio is None else f'{ratio:.2f}x'} | {hosts} |"
        )
    failed = any("error" in r for rs in runs.values() for r in rs)
    busy = [r["host"]["busy_reasons"] for r in runs[names[1]] if r.get("host", {}).get("busy")]
    if a.record and busy:
        print(f"not recorded: the host was busy during the defaults' run(s): {busy}; rerun on a quiet host")
    elif a.record and not failed:
        record_release_figure(summary[names[1]]["median_sps"], machine, a.rounds)
        print("recorded the defaults' median as the release's CPU figure in ppo_bench/release_figures.json")
    print(f"-> {out / 'bench.json'}")
    return 1 if failed or (a.record and busy) else 0


if __name__ == "__main__":
    sys.exit(main())
