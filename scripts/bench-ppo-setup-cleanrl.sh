#!/usr/bin/env bash
# Prepare the CleanRL side of scripts/bench-ppo.py, outside the repository:
#   * a virtual environment with CleanRL's own dependency pins (gymnasium 0.29.1, the
#     version CleanRL's pyproject.toml pins; under gymnasium 1.x its ppo.py records no
#     episode returns) and the same torch as this repository's .venv (like with like);
#   * CleanRL's ppo.py at a pinned commit, checked against its sha256.
# Nothing of CleanRL enters the repository. Usage:
#   scripts/bench-ppo-setup-cleanrl.sh            # -> /tmp/cleanrl-venv, /tmp/cleanrl/ppo.py
#   CLEANRL_VENV=DIR CLEANRL_DIR=DIR scripts/bench-ppo-setup-cleanrl.sh
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${CLEANRL_VENV:-/tmp/cleanrl-venv}"
dir="${CLEANRL_DIR:-/tmp/cleanrl}"
commit="fe8d8a03c41a7ef5b523e2e354bd01c363e786bb"   # vwxyzjn/cleanrl; cleanrl/ppo.py last changed in e421c2e
sha256="d8dfbb7ac0b21e747b77d6e6673e566db4d6cdacc83bcebcd19cf87ad0e459ae"
url="https://raw.githubusercontent.com/vwxyzjn/cleanrl/${commit}/cleanrl/ppo.py"

torch_version="$("$repo/.venv/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')"
# tensorboard as the images have it (the matrix's pin)
tensorboard_version="$(python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["packages"]["tensorboard"])' "$repo/images/variants.toml")"
if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet "torch==${torch_version}" "gymnasium==0.29.1" "numpy<2" \
    "tyro==1.0.17" "tensorboard==${tensorboard_version}"

mkdir -p "$dir"
if [[ ! -f "$dir/ppo.py" ]]; then
    curl --fail --silent --show-error --location "$url" -o "$dir/ppo.py.tmp"
    mv "$dir/ppo.py.tmp" "$dir/ppo.py"
fi
echo "$sha256  $dir/ppo.py" | sha256sum --check --quiet || {
    echo "bench-ppo-setup-cleanrl: $dir/ppo.py is not CleanRL's ppo.py at $commit (sha256 differs)" >&2
    exit 1
}
echo "CLEANRL_PYTHON=$venv/bin/python CLEANRL_PPO=$dir/ppo.py"
