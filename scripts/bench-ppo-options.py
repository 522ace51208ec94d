#!/usr/bin/env python3
"""Measure what each ppo_bench speed option is worth on this machine.

    .venv/bin/python scripts/bench-ppo-options.py [--steps 131072] [--out runs/bench-ppo-options]

Runs `python -m ppo_bench` (torch backend, CartPole-v1, seed 1) for a fixed
number of environment steps with KL early stopping off (--target-kl 0), so every
variant does the same work, once per variant (--repeat N: N rounds, variants
alternating, the best of N kept), and reports rollout, update and
end-to-end steps per second and process CPU seconds. Variants that need a GPU
(--cuda-graphs, --amp fp16) are skipped on a machine without one and reported
as such. Writes OUT/options.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

VARIANTS = {
    "defaults (1 thread, fused Adam, 256 envs x 16 steps)": [],
    "--threads 0 (torch default: one per core)": ["--threads", "0"],
    "--adam foreach": ["--adam", "foreach"],
    "--amp bf16": ["--amp", "bf16"],
    "--num-envs 64 --num-steps 64": ["--num-envs", "64", "--num-steps", "64"],
    "--num-envs 128 --num-steps 32": ["--num-envs", "128", "--num-steps", "32"],
    "--num-envs 1024 --num-steps 4": ["--num-envs", "1024", "--num-steps", "4"],
    "--compile": ["--compile"],
    "--cuda-graphs (GPU only)": ["--cuda-graphs", "--device", "cuda"],
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=131072, help="environment steps per variant")
    p.add_argument("--python", default=str(REPO / ".venv" / "bin" / "python"))
    p.add_argument("--out", default=str(REPO / "runs" / "bench-ppo-options"))
    p.add_argument("--skip", action="append", default=[], help="variant name prefix to skip (repeatable)")
    p.add_argument("--repeat", type=int, default=1, help="rounds over all variants; the fastest of each is kept")
    a = p.parse_args()
    out = Path(a.out)
    best: dict[str, dict] = {}
    for round_ in range(a.repeat):
        for i, (name, extra) in enumerate(VARIANTS.items()):
            if any(name.startswith(s) for s in a.skip):
                continue
            d = out / f"v{i}-r{round_}"
            cmd = [
                a.python,
                "-m",
                "ppo_bench",
                "--seed",
                "1",
                "--total-timesteps",
                str(a.steps),
                "--target-kl",
                "0",
                "--no-progress",
                "--progress-interval",
                "1000",
                "--checkpoint-every",
                "0",
                "--out-dir",
                str(d),
                *extra,
            ]
            proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False, timeout=600)
            row = {"variant": name, "command": cmd, "returncode": proc.returncode}
            if proc.returncode == 0:
                r = json.loads((d / "result.json").read_text())
                row.update(
                    {
                        k: r[k]
                        for k in (
                            "sps_rollout",
                            "sps_update",
                            "sps_end_to_end",
                            "wall_seconds",
                            "cpu_seconds",
                            "total_env_steps",
                            "final_mean_return",
                        )
                    }
                )
            else:
                row["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1]
            print(json.dumps({k: v for k, v in row.items() if k != "command"}), flush=True)
            if name not in best or row.get("sps_end_to_end", 0) > best[name].get("sps_end_to_end", 0):
                best[name] = row
    rows = list(best.values())
    out.mkdir(parents=True, exist_ok=True)
    (out / "options.json").write_text(json.dumps(rows, indent=2) + "\n")
    print("\n| variant | rollout SPS | update SPS | end-to-end SPS | CPU s |")
    print("|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['variant']} | not run: {r['error']} | | | |")
        else:
            print(
                f"| {r['variant']} | {r['sps_rollout']:,.0f} | {r['sps_update']:,.0f} | "
                f"{r['sps_end_to_end']:,.0f} | {r['cpu_seconds']:.2f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
