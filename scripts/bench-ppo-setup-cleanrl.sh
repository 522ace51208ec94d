#!/usr/bin/env bash
# Prepare the CleanRL side of scripts/bench-ppo.py and scripts/bench-ppo-atari.py, outside
# the repository:
#   * a virtual environment with CleanRL's own dependency pins where Python 3.11 can have
#     them: gymnasium 0.29.1 (CleanRL's pin; under gymnasium 1.x its ppo.py records no episode
#     returns), gym 0.23.1 (what ppo_atari_envpool.py imports), numpy<2, and the same torch
#     as this repository's .venv (like with like). envpool: CleanRL pins >=0.6.4,<0.7, which
#     publishes no Python 3.11 wheel; 0.8.4 is the newest release that still serves gym's
#     legacy API (4-tuple step) to gym 0.23.1, as ppo_atari_envpool.py expects;
#   * CleanRL's ppo.py and ppo_atari_envpool.py at a pinned commit, checked against their sha256.
# Nothing of CleanRL enters the repository. Usage:
#   scripts/bench-ppo-setup-cleanrl.sh            # -> /tmp/cleanrl-venv, /tmp/cleanrl/*.py
#   CLEANRL_VENV=DIR CLEANRL_DIR=DIR scripts/bench-ppo-setup-cleanrl.sh
#   CLEANRL_GIT=DIR ...   read the files from a clone of vwxyzjn/cleanrl (git show), not GitHub
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${CLEANRL_VENV:-/tmp/cleanrl-venv}"
dir="${CLEANRL_DIR:-/tmp/cleanrl}"
commit="fe8d8a03c41a7ef5b523e2e354bd01c363e786bb"   # vwxyzjn/cleanrl
declare -A sha256=(
    [ppo.py]="d8dfbb7ac0b21e747b77d6e6673e566db4d6cdacc83bcebcd19cf87ad0e459ae"   # last changed in e421c2e
    [ppo_atari_envpool.py]="d1672d9822929ef21c1ea0b63e853f330387892550b924abf32d6f755d6a97c8"                                            # last changed in 35896b1
)

torch_version="$("$repo/.venv/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')"
# tensorboard as the images have it (the matrix's pin)
tensorboard_version="$(python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["packages"]["tensorboard"])' "$repo/images/variants.toml")"
if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet "torch==${torch_version}" "gymnasium==0.29.1" "gym==0.23.1" "envpool==0.8.4" "numpy<2" \
    "tyro==1.0.17" "tensorboard==${tensorboard_version}"

mkdir -p "$dir"
for name in "${!sha256[@]}"; do
    if [[ ! -f "$dir/$name" ]]; then
        if [[ -n ${CLEANRL_GIT:-} ]]; then
            git --git-dir "$CLEANRL_GIT" show "$commit:cleanrl/$name" > "$dir/$name.tmp"
        else
            curl --fail --silent --show-error --location \
                "https://raw.githubusercontent.com/vwxyzjn/cleanrl/${commit}/cleanrl/$name" -o "$dir/$name.tmp"
        fi
        mv "$dir/$name.tmp" "$dir/$name"
    fi
    echo "${sha256[$name]}  $dir/$name" | sha256sum --check --quiet || {
        echo "bench-ppo-setup-cleanrl: $dir/$name is not CleanRL's $name at $commit (sha256 differs)" >&2
        exit 1
    }
done
echo "CLEANRL_PYTHON=$venv/bin/python CLEANRL_PPO=$dir/ppo.py CLEANRL_PPO_ATARI=$dir/ppo_atari_envpool.py"
