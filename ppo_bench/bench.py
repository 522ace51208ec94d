"""`proof --bench atari [--seconds N]`: how fast this host trains PPO on an Atari game in this
image, beside the figure the project measured for the release. A benchmark, not part of the
proof: the PPO gate stays CartPole, and a slow host is reported, never failed.

The release's figures live in ppo_bench/release_figures.json (one per device kind, with the
machine they were measured on and where the measurement is written up); a device kind no
release run has measured says so instead of showing a number.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TextIO

from common.cli import write_json
from common.host import speed_words
from common.procs import run_streamed

# --bench NAME -> the game it plays. EnvPool's settings (no sticky actions), as CleanRL's ppo_atari_envpool.py
# trains and as the release's figures were measured (docs/benchmarks.md), so the two compare like for like.
BENCHES = {"atari": "envpool/Breakout-v5"}
RELEASE_FIGURES = Path(__file__).resolve().parent.parent / "ppo_bench" / "release_figures.json"
SETUP_SECONDS = 120  # beyond --seconds: start-up, environments, the last iteration, writing outputs


def bench_command(env_id: str, seconds: float, device: str, out_dir: Path) -> list[str]:
    """ppo_bench with its Atari defaults for a fixed time."""
    return [
        sys.executable, "-m", "ppo_bench", "--env-id", env_id, "--time-limit", f"{seconds:g}", "--device", device,
        "--checkpoint-every", "0", "--no-progress", "--progress-interval", "5", "--out-dir", str(out_dir),
    ]  # fmt: skip # argv grouped as on a command line


def release_figure(env_id: str, device_kind: str, path: Path = RELEASE_FIGURES) -> dict | None:
    """The release's figure for `env_id` on `device_kind` ("cpu", "cuda"), or None where none was measured."""
    try:
        figures = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    entry = figures.get(env_id, {}).get(device_kind) if isinstance(figures, dict) else None
    return entry if isinstance(entry, dict) and entry.get("sps") else None


def bench_line(name: str, result: dict, release: dict | None) -> str:
    """The one line a user reads: this host's steps/s, on what, in how long, and the release's figure
    beside it; "not comparable" when the host was busy during the run (common.host's rule; ppo_bench's
    own output above it says the host's condition in full)."""
    kind = str(result.get("device", "cpu")).split(":")[0]
    where = result.get("gpu_name") or result.get("cpu") or "CPU"
    amp = (result.get("args") or {}).get("amp", "?")
    limit = (result.get("args") or {}).get("time_limit")
    sticky = (result.get("env_settings") or {}).get("repeat_action_probability")
    sps = result["sps_end_to_end"]
    mine = (
        f"proof --bench {name}: {sps:,.0f} steps/s on {kind} ({where}; {result.get('env_id')}"
        + ("" if sticky is None else f", sticky actions {sticky:g}")
        + f", {result.get('num_envs')} envs, amp {amp}; {result.get('total_env_steps'):,} steps in "
        f"{result.get('wall_seconds', 0):.1f} s" + (f", time limit {limit:g} s" if limit else "") + ")"
    )
    if release is None:
        unmeasured = "no GPU has run it yet" if kind == "cuda" else "not measured for this device kind"
        return f"{mine}; release figure on {kind}: none (unmeasured: {unmeasured})"
    other = release.get("on") not in (None, where)  # another CPU (or GPU) model than this host's
    line = (
        f"{mine}; release figure: {release['sps']:,.0f} steps/s on {release.get('on', '?')} "
        f"({speed_words(sps / release['sps'])}; {release.get('source', 'docs/benchmarks.md')})"
        + ("; not the same hardware, so the ratio compares two machines" if other else "")
    )
    host = result.get("host")
    if not host:
        return line
    if host.get("busy_reasons"):
        return f"{line}; not comparable: the host was busy ({'; '.join(host['busy_reasons'])})"
    return f"{line}; the host was quiet"


def run_bench(name: str, seconds: float, require_gpu: bool, out_dir: Path, host_cpu: str, out: TextIO) -> tuple[int, str]:
    """Run the benchmark; returns (exit code, its line). Exit 1 when it did not run to its end."""
    env_id = BENCHES[name]
    device = "cuda" if require_gpu else "auto"
    print(f"==> benchmark {name}: PPO on {env_id} for {seconds:g} s (not part of the proof)", file=out, flush=True)
    code = run_streamed(bench_command(env_id, seconds, device, out_dir), seconds + SETUP_SECONDS, out)
    try:
        result = json.loads((out_dir / "result.json").read_text())
    except (OSError, ValueError):
        result = {}
    if code != 0 or not result.get("sps_end_to_end"):
        why = "did not finish in time" if code is None else f"exit {code}"
        return 1, f"proof --bench {name}: FAILED: ppo_bench {why}; its output is above"
    if "cpu" not in result:  # the record says where it ran, as the line does
        result["cpu"] = host_cpu
        write_json(out_dir / "result.json", result)
    kind = str(result.get("device", "cpu")).split(":")[0]
    return 0, bench_line(name, result, release_figure(env_id, kind))
