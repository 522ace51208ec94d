#!/usr/bin/env bash
# The host's virtual environment .venv: the tools in requirements-dev.txt plus
# the packages the host shares with the image, at the image's versions: gymnasium, ale-py,
# matplotlib, tensorboard and tqdm at the matrix's pins and numpy at the default
# line's lock (the unit tests of ppo_bench run what the image runs), and the rlhf
# flavor's stack (the unit tests of rlhf_bench run the flavor's TRL). Reinstalls
# only when an input changed. Used by scripts/prepare-host.sh and the CI workflows.
# Then the signer's venv .venv-signer (scripts/signer-venv.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

shared=(--pin gymnasium --pin ale-py --pin matplotlib --pin tensorboard --pin tqdm --pin rlhf)  # a flavor's name: all its packages
# numpy is no pin of the matrix: the default line's lock (the image's own) says which
default_lock=images/locks/$(python3 build.py list --default)/amd64
numpy=$(grep -h -o '^numpy==[^ ]*' "$default_lock"/*.txt)
[[ -n $numpy ]] || { echo "host-venv: no numpy pin in $default_lock" >&2; exit 1; }
wanted=$(cat requirements-dev.txt; python3 build.py list "${shared[@]}"; echo "$numpy")
if [[ ! -x .venv/bin/python ]] || [[ "$wanted" != "$(cat .venv/.requirements 2>/dev/null)" ]]; then
    echo "==> creating .venv from requirements-dev.txt and the matrix's shared pins"
    python3 -m venv .venv
    mapfile -t pins < <(python3 build.py list "${shared[@]}")
    .venv/bin/pip install -q -r requirements-dev.txt "${pins[@]}" "$numpy"
    printf '%s\n' "$wanted" > .venv/.requirements
fi

bash scripts/signer-venv.sh
