#!/usr/bin/env python3
"""How much the PPO gate's steps/s moves between repeated runs on one machine: the noise `build.py diff`'s
--max-slowdown must stay above (common.rules.MAX_SLOWDOWN).

    .venv/bin/python scripts/bench-gate-spread.py [--runs 7] [--line 2.9-cu128] [--out bench-out/spread.json]

Runs the line's gate (images/expect/<line>.json's ppo_gate, the command `proof` runs, on the CPU) RUNS
times one after another, each in a fresh process, and prints each run's steps/s and seconds to target,
their median, and the largest shortfall below the median as a fraction. The seed is the gate's, so every
run takes the same steps: only the speed varies. Writes the runs, the machine and its load (the busy rule,
common.host) to OUT.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from common.host import host_cpu  # noqa: E402


def gate_command(gate: dict, out_dir: Path) -> list[str]:
    return [
        sys.executable, "-m", "ppo_bench", "--backend", gate["backend"], "--env-id", gate["env_id"], "--seed", str(gate["seed"]),
        "--total-timesteps", str(gate["total_timesteps"]), "--target-return", str(gate["target_return"]),
        "--device", "cpu", "--out-dir", str(out_dir), "--stop-at-target", "--fail-below-target", "--no-progress",
    ]  # fmt: skip # as smoke.proof.ppo_command writes it for the CPU


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--line", default="2.9-cu128")
    parser.add_argument("--out", type=Path, default=REPO / "bench-out" / "gate-spread.json")
    args = parser.parse_args()
    gate = json.loads((REPO / "images" / "expect" / f"{args.line}.json").read_text())["ppo_gate"]
    runs = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run(gate_command(gate, Path(tmp)), cwd=REPO, capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                print(f"run {i + 1} failed (exit {done.returncode}): {done.stderr.strip()[-300:]}", file=sys.stderr)
                return 1
            result = json.loads((Path(tmp) / "result.json").read_text())
        runs.append({"steps_per_second": result["sps_end_to_end"], "seconds_to_target": result["seconds_to_target"]})
        print(f"run {i + 1}: {result['sps_end_to_end']:,.0f} steps/s, {result['seconds_to_target']:.2f} s to target", flush=True)
    sps = [r["steps_per_second"] for r in runs]
    median = statistics.median(sps)
    record = {
        "line": args.line,
        "gate": gate,
        "cpu": host_cpu(),
        "runs": runs,
        "median_steps_per_second": median,
        "spread": round((max(sps) - min(sps)) / median, 3),
        "largest_shortfall": round((median - min(sps)) / median, 3),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(
        f"{args.runs} runs on {record['cpu']}: median {median:,.0f} steps/s, min {min(sps):,.0f}, max {max(sps):,.0f}; "
        f"spread {record['spread']:.1%}, largest shortfall below the median {record['largest_shortfall']:.1%} ({args.out})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
