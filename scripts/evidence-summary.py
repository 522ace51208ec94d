#!/usr/bin/env python3
"""Summarise a scripts/gpu-evidence.sh run as Markdown: python3 scripts/evidence-summary.py OUT_DIR.

Reads what the run wrote (machine.txt, steps.txt, proof/proof.json,
throughput-*.json, atari-*.json with atari-*.gpu.csv) and says for each step what it measured, or that it did not
finish. Nothing is reported as passed that did not pass.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def summary(out: Path) -> str:
    lines = [f"# GPU evidence: {out.name}", "", "```", (out / "machine.txt").read_text().strip(), "```", ""]
    steps = dict(line.split() for line in (out / "steps.txt").read_text().splitlines() if line.strip())
    lines += ["| step | exit | what it measured |", "|---|---|---|"]
    proof = load(out / "proof" / "proof.json")
    if proof:
        checks = ", ".join(f"{c['name']} {c['status']}" for c in (proof.get("smoke") or {}).get("checks", []))
        ppo = proof.get("ppo") or {}
        gate = (
            f"gate {ppo.get('device')}: solved={ppo.get('solved')} in {ppo.get('steps_to_target')} steps, "
            f"{ppo.get('seconds_to_target') or 0:.2f} s, {ppo.get('sps_end_to_end') or 0:,.0f} steps/s"
            if ppo
            else "gate not run"
        )
        ratio = proof.get("gpu_cpu_sps_ratio")
        lines.append(
            f"| proof | {steps.get('proof', '?')} | {proof.get('verdict')}<br>{checks}<br>{gate}"
            + (f"<br>GPU/CPU steps/s ratio of the gate: {ratio}x" if ratio else "")
            + " |"
        )
    else:
        lines.append(f"| proof | {steps.get('proof', '?')} | no proof.json: it did not finish (see evidence.log) |")
    for name in sorted(n for n in steps if n.startswith("throughput")):
        result = load(out / f"{name}.json")
        if result:
            lines.append(
                f"| {name} | {steps[name]} | {result['num_envs']} envs on {result['device']} {result.get('gpu_name') or ''}: "
                f"{result['sps_end_to_end']:,.0f} steps/s end to end ({result['sps_rollout']:,.0f} rollout, "
                f"{result['sps_update']:,.0f} update), final mean return {result['final_mean_return']} |"
            )
        else:
            lines.append(f"| {name} | {steps[name]} | no result.json: it did not finish (see evidence.log) |")
    for name in sorted(n for n in steps if n.startswith("atari")):
        result = load(out / f"{name}.json")
        if name == "atari" or not result:
            why = "ale-py did not import: NOT RUN" if name == "atari" else "no result.json: it did not finish (see evidence.log)"
            lines.append(f"| {name} | {steps[name]} | {why} |")
            continue
        args = result.get("args") or {}
        options = " ".join(f"--{k.replace('_', '-')}" for k in ("compile", "cuda_graphs", "channels_last") if args.get(k))
        lines.append(
            f"| {name} | {steps[name]} | Breakout, {result['num_envs']} envs, amp {args.get('amp')} {options} on "
            f"{result['device']} {result.get('gpu_name') or ''}: {result['sps_end_to_end']:,.0f} steps/s end to end "
            f"({result['sps_rollout']:,.0f} rollout, {result['sps_update']:,.0f} update) over {result['total_env_steps']:,} steps; "
            f"{gpu_use(out / f'{name}.gpu.csv', result)} |"
        )
    return "\n".join(lines) + "\n"


def gpu_use(csv: Path, result: dict) -> str:
    """GPU utilisation (mean and peak of nvidia-smi's 0.5 s samples) and memory, or why there are none."""
    peak_alloc = result.get("gpu_max_memory_allocated_mib")
    alloc = f"torch peak allocated {peak_alloc:,.0f} MiB" if peak_alloc is not None else "no torch GPU memory (not on a GPU)"
    try:
        rows = [[float(x) for x in line.split(",")] for line in csv.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        rows = []
    if not rows:
        return f"GPU utilisation not sampled; {alloc}"
    util = [r[0] for r in rows]
    return (
        f"GPU utilisation mean {sum(util) / len(util):.0f}%, peak {max(util):.0f}% ({len(rows)} samples); "
        f"memory used peak {max(r[1] for r in rows):,.0f} MiB; {alloc}"
    )


if __name__ == "__main__":
    print(summary(Path(sys.argv[1])), end="")
