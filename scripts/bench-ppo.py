#!/usr/bin/env python3
"""ppo_bench against CleanRL's ppo.py, side by side, on this machine, in one run.

    scripts/bench-ppo.py --cleanrl-ppo /tmp/cleanrl/ppo.py \
        --cleanrl-python /tmp/cleanrl-venv/bin/python [--seeds 1,2,3] [--out bench-out]

(or set CLEANRL_PPO / CLEANRL_PYTHON; scripts/bench-ppo-setup-cleanrl.sh makes both.)
For each seed it runs CleanRL's ppo.py with its defaults (CartPole-v1, 4 envs x
128 steps) and `python -m ppo_bench` with the gate's command line, alternating,
and measures for each the environment steps, wall seconds and process CPU
seconds until the mean return over the last 100 finished episodes first reaches
475, and the end-to-end steps per second up to then. CleanRL is stopped once it
gets there (its 500k-step default budget otherwise), so the benchmark takes a
few minutes. Writes OUT/bench.json (per-seed numbers, ratios, medians, machine,
exact commands) and prints a Markdown table. Exit status 0 when every run
finished (ratios are reported, not gated), 1 when a run failed, and with
--check also 1 when a median ratio is below 10.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUNNER = Path(__file__).resolve().parent / "bench-ppo-cleanrl-runner.py"
TARGET, WINDOW = 475.0, 100
STAMP = re.compile(r"^@([\d.]+) ([\d.]+)@ (.*)$")
EPISODE = re.compile(r"global_step=(\d+), episodic_return=\[?\s*([-\d.eE+]+)")
SPS = re.compile(r"^SPS: (\d+)")


def machine() -> dict:
    model = None
    if shutil.which("lscpu"):
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        model = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), None)
    nproc = subprocess.run(["nproc"], capture_output=True, text=True, check=False).stdout.strip()
    return {
        "nproc": int(nproc) if nproc.isdigit() else os.cpu_count(),
        "cpu_model": model,
        "kernel": platform.release(),
        "machine": platform.machine(),
        "gpu": "none used (CPU runs)",
    }


def run_cleanrl(python: str, ppo: str, seed: int, workdir: Path, timeout: float, threads: int) -> dict:
    """CleanRL's ppo.py with its defaults; stopped once the target is reached."""
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [python, "-u", str(RUNNER), ppo, "--seed", str(seed)]
    recent: deque[float] = deque(maxlen=WINDOW)
    res = {
        "command": cmd,
        "omp_num_threads": threads,
        "steps_to_target": None,
        "seconds_to_target": None,
        "cpu_seconds_to_target": None,
        "episodes": 0,
        "last_reported_sps": None,
    }
    last = (0.0, 0.0, 0)
    t_launch = time.perf_counter()
    with open(workdir / "stderr.log", "w") as err, open(workdir / "stdout.log", "w") as log:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))  # torch's default thread count
        proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1)
        try:
            for line in proc.stdout:
                log.write(line)
                if time.perf_counter() - t_launch > timeout:
                    res["error"] = f"timed out after {timeout:.0f}s"
                    break
                m = STAMP.match(line.strip())
                if not m:
                    continue
                wall, cpu, text = float(m.group(1)), float(m.group(2)), m.group(3)
                if s := SPS.match(text):
                    res["last_reported_sps"] = int(s.group(1))
                if not (e := EPISODE.search(text)):
                    continue
                step = int(e.group(1))
                recent.append(float(e.group(2)))
                res["episodes"] += 1
                last = (wall, cpu, step)
                if len(recent) == WINDOW and sum(recent) / WINDOW >= TARGET:
                    res.update(steps_to_target=step, seconds_to_target=wall, cpu_seconds_to_target=cpu)
                    break
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    if res["episodes"] == 0:
        res["error"] = f"CleanRL printed no episode returns: its venv needs gymnasium<1.0 (see {workdir / 'stderr.log'})"
    wall, cpu, step = last
    res.update(
        wall_seconds=wall,
        cpu_seconds=cpu,
        env_steps=step,
        sps_end_to_end=step / wall if wall else None,
        returncode=proc.returncode,
    )
    return res


def run_ours(python: str, seed: int, out_dir: Path, extra: list[str], timeout: float) -> dict:
    """ppo_bench with the gate's command line (build.py runs the same in the image)."""
    cmd = [
        python,
        "-m",
        "ppo_bench",
        "--backend",
        "torch",
        "--env-id",
        "CartPole-v1",
        "--seed",
        str(seed),
        "--total-timesteps",
        "2000000",
        "--target-return",
        str(TARGET),
        "--stop-at-target",
        "--no-progress",
        "--out-dir",
        str(out_dir),
        *extra,
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)
    process_wall = time.perf_counter() - t0
    (out_dir / "stdout.log").parent.mkdir(parents=True, exist_ok=True)
    (out_dir / "stdout.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0 or not (out_dir / "result.json").exists():
        return {"command": cmd, "error": f"exit {proc.returncode}: {proc.stderr.strip()[-500:]}"}
    r = json.loads((out_dir / "result.json").read_text())
    keep = (
        "solved",
        "steps_to_target",
        "seconds_to_target",
        "cpu_seconds_to_target",
        "wall_seconds",
        "cpu_seconds",
        "sps_end_to_end",
        "sps_rollout",
        "sps_update",
        "total_env_steps",
        "num_envs",
        "torch_threads",
        "device",
        "torch",
    )
    return {"command": cmd, "process_wall_seconds": process_wall, **{k: r[k] for k in keep}}


def ratio(a, b):
    return a / b if a and b else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cleanrl-ppo", default=os.environ.get("CLEANRL_PPO"), help="path of CleanRL's ppo.py")
    p.add_argument(
        "--cleanrl-python",
        default=os.environ.get("CLEANRL_PYTHON"),
        help="python of a venv with CleanRL's deps (gymnasium 0.29.1, tyro, tensorboard, torch)",
    )
    p.add_argument("--python", default=str(REPO / ".venv" / "bin" / "python"), help="python for ppo_bench")
    p.add_argument("--seeds", default="1,2,3", help="comma-separated seeds (default 1,2,3)")
    p.add_argument("--out", default=str(REPO / "runs" / "bench-ppo"), help="output folder")
    p.add_argument("--ours-arg", action="append", default=[], help="extra argument for ppo_bench (repeatable)")
    p.add_argument(
        "--cleanrl-threads",
        type=int,
        default=1,
        help="OMP_NUM_THREADS for CleanRL (default 1, like ppo_bench's --threads default)",
    )
    p.add_argument("--timeout", type=float, default=400, help="seconds allowed per run")
    p.add_argument("--check", action="store_true", help="exit 1 when a median ratio is below 10")
    a = p.parse_args()
    if not a.cleanrl_ppo or not Path(a.cleanrl_ppo).is_file():
        p.error("--cleanrl-ppo (or CLEANRL_PPO) must name CleanRL's ppo.py; scripts/bench-ppo-setup-cleanrl.sh fetches it")
    if not a.cleanrl_python or not shutil.which(a.cleanrl_python):
        p.error("--cleanrl-python (or CLEANRL_PYTHON) must name the python of CleanRL's venv")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in a.seeds.split(",")]

    runs, failed = [], False
    for seed in seeds:  # alternate the two programs so both see the same machine conditions
        print(f"seed {seed}: CleanRL ppo.py ...", flush=True)
        cr = run_cleanrl(a.cleanrl_python, a.cleanrl_ppo, seed, out / f"cleanrl-seed{seed}", a.timeout, a.cleanrl_threads)
        print(
            f"  {json.dumps({k: cr.get(k) for k in ('steps_to_target', 'seconds_to_target', 'cpu_seconds_to_target', 'sps_end_to_end', 'error')})}",
            flush=True,
        )
        print(f"seed {seed}: ppo_bench ...", flush=True)
        ours = run_ours(a.python, seed, out / f"ppo_bench-seed{seed}", a.ours_arg, a.timeout)
        print(
            f"  {json.dumps({k: ours.get(k) for k in ('steps_to_target', 'seconds_to_target', 'cpu_seconds_to_target', 'sps_end_to_end', 'error')})}",
            flush=True,
        )
        failed |= "error" in cr or "error" in ours
        runs.append(
            {
                "seed": seed,
                "cleanrl": cr,
                "ppo_bench": ours,
                "ratios": {
                    "cpu_seconds_to_target": ratio(cr.get("cpu_seconds_to_target"), ours.get("cpu_seconds_to_target")),
                    "seconds_to_target": ratio(cr.get("seconds_to_target"), ours.get("seconds_to_target")),
                    "sps_end_to_end": ratio(ours.get("sps_end_to_end"), cr.get("sps_end_to_end")),
                },
            }
        )

    def median(key):
        vals = [r["ratios"][key] for r in runs if r["ratios"][key] is not None]
        return statistics.median(vals) if vals else None

    summary = {k: median(k) for k in ("cpu_seconds_to_target", "seconds_to_target", "sps_end_to_end")}
    summary["targets_met"] = {
        "cpu_time_to_475_at_most_one_tenth": (summary["cpu_seconds_to_target"] or 0) >= 10,
        "sps_at_least_10x": (summary["sps_end_to_end"] or 0) >= 10,
    }
    report = {
        "machine": machine(),
        "target_return": TARGET,
        "window": WINDOW,
        "seeds": seeds,
        "cleanrl_ppo": str(Path(a.cleanrl_ppo).resolve()),
        "runs": runs,
        "median_ratios": summary,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    (out / "bench.json").write_text(json.dumps(report, indent=2) + "\n")

    print("\n| seed | program | steps to 475 | wall s to 475 | CPU s to 475 | end-to-end SPS |")
    print("|---|---|---|---|---|---|")
    for r in runs:
        for name in ("cleanrl", "ppo_bench"):
            x = r[name]
            print(
                f"| {r['seed']} | {name} | {x.get('steps_to_target')} | {_f(x.get('seconds_to_target'))} | "
                f"{_f(x.get('cpu_seconds_to_target'))} | {_f(x.get('sps_end_to_end'), 0)} |"
            )
    print(
        f"\nmedian ratios (CleanRL / ppo_bench for time, ppo_bench / CleanRL for SPS): "
        f"{json.dumps({k: v for k, v in summary.items() if k != 'targets_met'})}"
    )
    print(f"targets met: {json.dumps(summary['targets_met'])}  ->  {out / 'bench.json'}")
    if failed:
        return 1
    return 1 if a.check and not all(summary["targets_met"].values()) else 0


def _f(x, digits=2):
    return "-" if x is None else f"{x:,.{digits}f}"


if __name__ == "__main__":
    sys.exit(main())
