#!/usr/bin/env python3
"""Summarise a scripts/gpu-evidence.sh run as Markdown: python3 scripts/evidence-summary.py OUT_DIR.

Reads what the run wrote (machine.txt, steps.txt, proof/proof.json,
throughput-*.json) and says for each step what it measured, or that it did not
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
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(summary(Path(sys.argv[1])), end="")
